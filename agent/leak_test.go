package agent

import (
	"bytes"
	"context"
	"fmt"
	"runtime/pprof"
	"strings"
	"testing"
	"time"
)

// Every goroutine an agent starts has an owner that stops it and waits for
// it, so none is left once Run has returned. The in-process test agents
// run under a pprof label naming them, which every goroutine they start
// inherits, so the check tells one agent's goroutines from those of the
// agents still running beside it.

// agentLabel is the pprof label key an in-process test agent runs under.
const agentLabel = "logagent_test_agent"

// runLabelled runs f with the label naming node, inherited by every
// goroutine f starts.
func runLabelled(ctx context.Context, node string, f func(context.Context)) {
	pprof.Do(ctx, pprof.Labels(agentLabel, node), f)
}

// ownedFrames are the functions whose goroutines must end with the agent:
// the agent's own (its partition runtime and peer client included: their
// packages' frames do not start with "agent.") and those of its Consul
// client. fasthttp's and net/http's pooled connection goroutines carry the
// label too but belong to their pools and end when idle.
var ownedFrames = []string{
	"github.com/logagent/logagent/agent.",
	"github.com/logagent/logagent/agent/partition.",
	"github.com/logagent/logagent/agent/peer.",
	"github.com/logagent/logagent/election.",
}

// testFrames are functions of this package's tests, which are not the
// agent's.
var testFrames = []string{
	"github.com/logagent/logagent/agent.(*testAgent)",
	"github.com/logagent/logagent/agent.runLabelled",
}

// exitGrace bounds how long a goroutine that its owner has already waited
// for may take to return: the owner's Wait returns once the goroutine has
// signalled, not once its frames are gone. It is short on purpose: a
// follower's fetch left running outlives stop by up to fetch_max_wait
// (250ms here), and a grace that long would hide it.
const exitGrace = 100 * time.Millisecond

// leftoverGoroutines returns the goroutines labelled with node that run
// the agent's code, one stack each.
func leftoverGoroutines(node string) []string {
	var buf bytes.Buffer
	if err := pprof.Lookup("goroutine").WriteTo(&buf, 1); err != nil {
		return []string{fmt.Sprintf("goroutine profile: %v", err)}
	}
	label := fmt.Sprintf("%q:%q", agentLabel, node)
	var out []string
	// debug=1 groups goroutines of one stack and label set into blocks
	// separated by a blank line: "N @ pcs", "# labels: {...}", frames.
	for _, block := range strings.Split(buf.String(), "\n\n") {
		if !strings.Contains(block, "# labels: {") || !strings.Contains(block, label) {
			continue
		}
		if ownedStack(block) {
			out = append(out, block)
		}
	}
	return out
}

// ownedStack says whether a goroutine profile block has a frame of the
// agent's code.
func ownedStack(block string) bool {
	for _, line := range strings.Split(block, "\n") {
		// Frames read "#\t0xpc\tfunction+0xoff\tfile:line".
		fields := strings.Split(line, "\t")
		if len(fields) < 3 || fields[0] != "#" {
			continue
		}
		fn := fields[2]
		if hasAnyPrefix(fn, testFrames) {
			continue
		}
		if hasAnyPrefix(fn, ownedFrames) {
			return true
		}
	}
	return false
}

func hasAnyPrefix(s string, prefixes []string) bool {
	for _, p := range prefixes {
		if strings.HasPrefix(s, p) {
			return true
		}
	}
	return false
}

// checkNoLeftoverGoroutines fails the test if goroutines node's agent
// started still run exitGrace after its Run returned.
func checkNoLeftoverGoroutines(t *testing.T, node string) {
	t.Helper()
	deadline := time.Now().Add(exitGrace)
	for {
		left := leftoverGoroutines(node)
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("%s: %d goroutine stacks still run %s after Run returned:\n%s", node, len(left), exitGrace,
				strings.Join(left, "\n\n"))
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestOwnedStack(t *testing.T) {
	for _, tc := range []struct {
		name  string
		block string
		want  bool
	}{
		{"replica fetch", "1 @ 0x1 0x2\n# labels: {\"logagent_test_agent\":\"n1\"}\n#\t0x1\tgithub.com/valyala/fasthttp.(*HostClient).DoTimeout+0x10\t/x/client.go:1\n#\t0x2\tgithub.com/logagent/logagent/agent/partition.(*Replica).fetch.func1+0x20\t/x/replica_follower.go:1", true},
		{"election loop", "1 @ 0x1\n# labels: {\"logagent_test_agent\":\"n1\"}\n#\t0x1\tgithub.com/logagent/logagent/election.(*Client).watchLoop+0x10\t/x/watch.go:1", true},
		{"pooled connection", "1 @ 0x1\n# labels: {\"logagent_test_agent\":\"n1\"}\n#\t0x1\tnet/http.(*persistConn).readLoop+0x10\t/x/transport.go:1", false},
		{"test agent", "1 @ 0x1 0x2\n# labels: {\"logagent_test_agent\":\"n1\"}\n#\t0x1\tgithub.com/logagent/logagent/agent.runLabelled+0x10\t/x/leak_test.go:1\n#\t0x2\tgithub.com/logagent/logagent/agent.(*testAgent).start.func1+0x10\t/x/cluster_test.go:1", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := ownedStack(tc.block); got != tc.want {
				t.Errorf("ownedStack = %v, want %v", got, tc.want)
			}
		})
	}
}
