package partition

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/logagent/logagent/election"
	"github.com/logagent/logagent/internal/consultest"
)

// TestDrainKeepsNoDeadReplicaInTarget: a partition n1, n2, n3 whose n3 is
// dead (not yet for replace_dead_after) has n2 drained. The drain's move
// must not keep the dead n3 in its target: the move would wait for n3 to
// join the ISR forever, and while it is in flight self-healing starts no
// other move, so n3 is never re-placed once it is due either.
func TestDrainKeepsNoDeadReplicaInTarget(t *testing.T) {
	_, m, coord := startHealing(t, []string{"n2", "n4", "n5"}, "4s", time.Now) // n3 dead
	createTopic(t, coord, "hs", [][]string{{"n1", "n2", "n3"}}, 1)
	waitLeading(t, m, "hs")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := coord.SetDraining(ctx, "n2", true); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	var first []string
	waitFor(t, func() bool {
		pm, _ := coord.Metadata().Partition("hs", 0)
		if pm.Reassign != nil && first == nil {
			first = slices.Clone(pm.Reassign.Target)
		}
		return !slices.Contains(pm.Replicas, "n2") || pm.Reassign != nil
	}, "the drain's move started")
	t.Logf("drain's move target %v, %v after the drain", first, time.Since(start))
	// Well past n3's replace_dead_after: the partition must be on its way
	// off both n2 and n3.
	deadline := time.Now().Add(12 * time.Second)
	for {
		pm, _ := coord.Metadata().Partition("hs", 0)
		if pm.Reassign != nil && !slices.Contains(pm.Reassign.Target, "n3") && !slices.Contains(pm.Reassign.Target, "n2") {
			t.Logf("move target %v", pm.Reassign.Target)
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("12 s on, the partition is %v with move %+v: the dead n3 stays a target replica, the move waits for it forever", pm.Replicas, pm.Reassign)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// logWatch is an hclog sink that notes when a line holding want is logged.
type logWatch struct {
	want string
	seen atomic.Bool
}

func (w *logWatch) Write(p []byte) (int, error) {
	if strings.Contains(string(p), w.want) {
		w.seen.Store(true)
	}
	return len(p), nil
}

// TestDrainWithSelfHealingOffWaitsForTheDeadReplica: with self-healing off
// (replace_dead_after 0), a partition n1, n2, n3 whose n3 is dead has n2
// drained. A dead replica is then never due, and the drain's move must not
// keep it in its target either: it would wait for n3 to join the ISR
// forever, and keep every other move of the partition from starting. The
// leader waits, says why, and starts the move once n3 is back.
func TestDrainWithSelfHealingOffWaitsForTheDeadReplica(t *testing.T) {
	srv, m, coord := startHealing(t, []string{"n2", "n4", "n5"}, "0s", time.Now) // n3 dead
	waiting := &logWatch{want: "self-healing is off"}
	m.deps.Log.(hclog.InterceptLogger).RegisterSink(hclog.NewSinkAdapter(&hclog.LoggerOptions{Level: hclog.Warn, Output: waiting}))
	createTopic(t, coord, "hs0", [][]string{{"n1", "n2", "n3"}}, 1)
	waitLeading(t, m, "hs0")
	// The leader has seen n3 dead once it drops it from the ISR.
	waitFor(t, func() bool {
		pm, _ := coord.Metadata().Partition("hs0", 0)
		return !slices.Contains(pm.State.ISR, "n3")
	}, "the leader to drop the dead n3 from the ISR")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := coord.SetDraining(ctx, "n2", true); err != nil {
		t.Fatal(err)
	}
	waitLoggedWithoutMove(t, coord, "hs0", waiting, "with self-healing off and n3 dead, the drain of n2 (a move that would wait for the dead n3 forever)")
	if pm, _ := coord.Metadata().Partition("hs0", 0); !slices.Equal(pm.Replicas, []string{"n1", "n2", "n3"}) {
		t.Fatalf("the leader says it waits, yet the partition is %v", pm.Replicas)
	}

	// n3 comes back: the drain's move starts, n2 out, n3 kept.
	startElectionOnly(t, srv, "n3")
	waitFor(t, func() bool {
		pm, _ := coord.Metadata().Partition("hs0", 0)
		return pm.Reassign != nil || !slices.Contains(pm.Replicas, "n2")
	}, "the drain's move once n3 is back")
	pm, _ := coord.Metadata().Partition("hs0", 0)
	target := pm.Replicas
	if pm.Reassign != nil {
		target = pm.Reassign.Target
	}
	if slices.Contains(target, "n2") || !slices.Contains(target, "n3") || len(target) != 3 {
		t.Fatalf("the drain's move once n3 is back goes to %v, want n2 replaced and n3 kept", target)
	}
	t.Logf("move target %v", target)
}

// waitLoggedWithoutMove waits up to 20 s for the leader of topic's
// partition 0 to log waiting.want, failing if the partition gets a move
// before or has one after: after says what must not start a move.
func waitLoggedWithoutMove(t *testing.T, coord *election.Client, topic string, waiting *logWatch, after string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !waiting.seen.Load() {
		pm, _ := coord.Metadata().Partition(topic, 0)
		if pm.Reassign != nil {
			t.Fatalf("%s: the leader started a move to %v", after, pm.Reassign.Target)
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: 20 s on, the leader has neither started a move nor logged %q (partition %+v)", after, waiting.want, pm)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if pm, _ := coord.Metadata().Partition(topic, 0); pm.Reassign != nil {
		t.Fatalf("%s: the leader logged %q, yet the partition has move %+v", after, waiting.want, pm.Reassign)
	}
}

// startHealing starts Consul, an election client for each agent in alive
// (an agent never started is dead to the others), and n1's manager with
// cluster.replace_dead_after set.
func startHealing(t *testing.T, alive []string, replaceDeadAfter string, now func() time.Time) (*consultest.Server, *Manager, *election.Client) {
	t.Helper()
	return startHealingHCL(t, alive, replaceDeadAfter, "", now)
}

// startHealingHCL is startHealing with extraHCL added to n1's
// configuration.
func startHealingHCL(t *testing.T, alive []string, replaceDeadAfter, extraHCL string, now func() time.Time) (*consultest.Server, *Manager, *election.Client) {
	t.Helper()
	srv := consultest.Start(t)
	for _, n := range alive {
		startElectionOnly(t, srv, n)
	}
	m, coord := startManager(t, srv, "n1", fmt.Sprintf("cluster {\n  replace_dead_after = %q\n}\n", replaceDeadAfter)+extraHCL, now)
	return srv, m, coord
}
