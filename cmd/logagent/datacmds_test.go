package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/logagent/logagent/client"
)

// exitCodeOf is the exit code run gives a command's error.
func exitCodeOf(err error) int {
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return exitOK
	case errors.Is(err, errUsage):
		return exitUsage
	}
	return exitFailure
}

type cliCase struct {
	name      string
	args      []string
	code      int
	stdout    []string // substrings
	stderrHas []string
}

func checkCLI(t *testing.T, c cliCase, code int, stdout, stderr string) {
	t.Helper()
	if code != c.code {
		t.Errorf("exit %d, want %d\nstdout: %s\nstderr: %s", code, c.code, stdout, stderr)
	}
	for _, s := range c.stdout {
		if !strings.Contains(stdout, s) {
			t.Errorf("stdout lacks %q:\n%s", s, stdout)
		}
	}
	for _, s := range c.stderrHas {
		if !strings.Contains(stderr, s) {
			t.Errorf("stderr lacks %q:\n%s", s, stderr)
		}
	}
}

func TestTopicCommands(t *testing.T) {
	f := newFakeClientAPI(t)
	addr := f.srv.URL
	// In order: each case sees what the ones before it did.
	cases := []cliCase{
		{"create", []string{"topic", "create", "-addr", addr, "-name", "orders", "-partitions", "2", "-replication-factor", "1", "-min-insync-replicas", "1"}, 0,
			[]string{"created topic orders: 2 partition(s), replication factor 1, min_insync_replicas 1\n", "every partition has a leader\n"}, nil},
		{"create again", []string{"topic", "create", "-addr", addr, "orders"}, 1, nil, []string{"logagent topic: fake: topic_exists: 'logagent topic describe' shows it\n"}},
		{"create without a name", []string{"topic", "create", "-addr", addr}, 2, nil, []string{"name the topic"}},
		{"named twice", []string{"topic", "create", "-addr", addr, "-name", "a", "b"}, 2, nil, []string{"named twice"}},
		{"bad name", []string{"topic", "create", "-addr", addr, "bad/name"}, 2, nil, []string{"invalid topic name"}},
		{"negative partitions", []string{"topic", "create", "-addr", addr, "-partitions", "-1", "x"}, 2, nil, []string{"must not be negative"}},
		{"extra argument", []string{"topic", "create", "-addr", addr, "x", "y"}, 2, nil, []string{`unexpected argument "y"`}},
		{"list", []string{"topic", "list", "-addr", addr}, 0, []string{"orders\n"}, nil},
		{"describe, flags after the name", []string{"topic", "describe", "orders", "-addr", addr}, 0, []string{
			"topic orders: 2 partition(s)\n",
			"config: min_insync_replicas=1 replication_factor=1\n",
			"PARTITION  LEADER  EPOCH  REPLICAS  ISR  HW  LOG-START  UNCOMMITTED  STATE\n",
			"0          n1      1      n1        n1   0   0          -            ok\n",
			"1          n1      1      n1        n1   0   0          -            ok\n",
		}, nil},
		{"describe json", []string{"topic", "describe", "-addr", addr, "orders", "-format", "json"}, 0, []string{
			`"name": "orders"`, `"replication_factor": 1`, `"partition": 1`, `"high_watermark": 0`, `"log_end_offset": null`, `"state": "ok"`,
		}, nil},
		{"describe bad format", []string{"topic", "describe", "-addr", addr, "orders", "-format", "yaml"}, 2, nil, []string{`-format "yaml": want text or json`}},
		{"list json", []string{"topic", "list", "-addr", addr, "-format", "json"}, 0, []string{"[\n  \"orders\"\n]\n"}, nil},
		{"describe unknown", []string{"topic", "describe", "-addr", addr, "-name", "nope"}, 1, nil, []string{"logagent topic: fake: unknown_topic: 'logagent topic list' shows the topics there are\n"}},
		{"delete", []string{"topic", "delete", "-addr", addr, "orders"}, 0, []string{"deleted topic orders\n"}, nil},
		{"delete again", []string{"topic", "delete", "-addr", addr, "orders"}, 1, nil, []string{"unknown_topic"}},
		{"no subcommand", []string{"topic"}, 2, nil, []string{"Usage: logagent topic", "name a subcommand"}},
		{"unknown subcommand", []string{"topic", "frob"}, 2, nil, []string{`unknown subcommand "frob"`}},
		{"help", []string{"topic", "-h"}, 0, nil, []string{"describe"}},
		{"bad address", []string{"topic", "list", "-addr", "ftp://x"}, 2, nil, []string{"-addr"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			code := run(c.args, &out, &errb)
			checkCLI(t, c, code, out.String(), errb.String())
		})
	}
}

// TestTopicCreateSays: topic create prints what was created, warns when
// the default replication factor was capped by too few live agents, and
// says how many partitions have a leader while it waits for them.
func TestTopicCreateSays(t *testing.T) {
	three := []client.AgentInfo{{NodeID: "n1"}, {NodeID: "n2"}, {NodeID: "n3"}}
	cases := []struct {
		cliCase
		live       []client.AgentInfo
		leaderless int
		noStderr   []string
	}{
		{cliCase{"defaults capped by one live agent", []string{"topic", "create", "capped"}, 0,
			[]string{"created topic capped: 3 partition(s), replication factor 1, min_insync_replicas 1\n", "every partition has a leader\n"},
			[]string{"WARNING: replication factor 1, not 3: 1 agent(s) were live", "WARNING: each record is on 1 agent(s) only", "-replication-factor 3"}},
			nil, 0, []string{"min_insync_replicas 1 of 1"}},
		{cliCase{"defaults capped by two live agents", []string{"topic", "create", "two"}, 0,
			[]string{"replication factor 2, min_insync_replicas 2\n"},
			[]string{"WARNING: replication factor 2, not 3: 2 agent(s) were live", "WARNING: min_insync_replicas 2 of 2 replicas: acks=all writes are refused while any of them is down.\n"}},
			[]client.AgentInfo{{NodeID: "n1"}, {NodeID: "n2"}}, 0, nil},
		{cliCase{"defaults capped by an agent in maintenance mode", []string{"topic", "create", "maint"}, 0,
			[]string{"replication factor 2, min_insync_replicas 2\n"},
			[]string{"WARNING: replication factor 2, not 3: 2 agent(s) were live and taking new replicas (1 more in maintenance mode or with a check in warning)",
				"WARNING: each record is on 2 agent(s) only"}},
			[]client.AgentInfo{{NodeID: "n1"}, {NodeID: "n2"}, {NodeID: "n3", NotPassing: true}}, 0, nil},
		{cliCase{"defaults capped by an agent being drained", []string{"topic", "create", "drained"}, 0,
			[]string{"replication factor 2, min_insync_replicas 2\n"},
			[]string{"WARNING: replication factor 2, not 3: 2 agent(s) were live and taking new replicas (1 more being drained)",
				"WARNING: each record is on 2 agent(s) only"}},
			[]client.AgentInfo{{NodeID: "n1"}, {NodeID: "n2", Draining: true}, {NodeID: "n3"}}, 0, nil},
		{cliCase{"defaults with three live agents", []string{"topic", "create", "full"}, 0,
			[]string{"created topic full: 3 partition(s), replication factor 3, min_insync_replicas 2\n"}, nil},
			three, 0, []string{"WARNING"}},
		{cliCase{"asked for one replica", []string{"topic", "create", "one", "-replication-factor", "1"}, 0,
			[]string{"replication factor 1, min_insync_replicas 1\n"}, nil},
			nil, 0, []string{"WARNING"}},
		{cliCase{"waits for the leaders", []string{"topic", "create", "slow"}, 0,
			[]string{"every partition has a leader\n"}, []string{"waiting for leaders: 0 of 3 partition(s) led\n"}},
			three, 4, nil},
		{cliCase{"leaders not within the timeout", []string{"topic", "create", "never", "-timeout", "1s"}, 1,
			nil, []string{"waiting for leaders: 0 of 3 partition(s) led\n", "topic never is created, but 3 of its 3 partition(s) have no leader yet: 'logagent status' shows them\n"}},
			three, 1 << 20, nil},
		{cliCase{"without waiting", []string{"topic", "create", "nowait", "-wait=false"}, 0,
			[]string{"created topic nowait"}, nil},
			three, 1 << 20, []string{"waiting"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := newFakeClientAPI(t)
			if c.live != nil {
				f.live = c.live
			}
			f.leaderless = c.leaderless
			var out, errb bytes.Buffer
			start := time.Now()
			code := run(append(c.args, "-addr", f.srv.URL), &out, &errb)
			checkCLI(t, c.cliCase, code, out.String(), errb.String())
			for _, s := range c.noStderr {
				if strings.Contains(errb.String(), s) {
					t.Errorf("stderr has %q:\n%s", s, errb.String())
				}
			}
			if took := time.Since(start); took > 5*time.Second {
				t.Errorf("took %s", took)
			}
		})
	}
}

func TestAddrFromEnvironment(t *testing.T) {
	f := newFakeClientAPI(t)
	f.addTopic(client.TopicInfo{Name: "env-topic"})
	t.Setenv(client.AddrEnv, f.srv.URL)
	var out, errb bytes.Buffer
	if code := run([]string{"topic", "list"}, &out, &errb); code != 0 || out.String() != "env-topic\n" {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, out.String(), errb.String())
	}
}

func TestStatusTable(t *testing.T) {
	f := newFakeClientAPI(t)
	f.live = []client.AgentInfo{{NodeID: "n2", ClientAddress: "127.0.0.1:7071", PeerAddress: "127.0.0.1:7172"},
		{NodeID: "n1", ClientAddress: "127.0.0.1:7070", PeerAddress: "127.0.0.1:7171"}}
	logEnd := int64(45)
	f.addTopic(client.TopicInfo{Name: "b", Config: map[string]json.RawMessage{"min_insync_replicas": json.RawMessage("2")},
		Partitions: []client.PartitionInfo{
			{Partition: 0, Leader: "", Epoch: 4, Replicas: []string{"n1", "n2", "n3"}, ISR: nil, HighWatermark: 10},
			{Partition: 1, Leader: "n3", Epoch: 9, Replicas: []string{"n1", "n2", "n3"}, ISR: []string{"n3"}, HighWatermark: 5, LogStartOffset: 2},
			{Partition: 2, Leader: "n1", Epoch: 2, Replicas: []string{"n1", "n2", "n3"}, ISR: []string{"n1", "n2", "n3"},
				Reassignment: &client.Reassignment{Target: []string{"n1", "n2"}, Adding: []string{}, Removing: []string{"n3"}}},
		}})
	f.addTopic(client.TopicInfo{Name: "a", Partitions: []client.PartitionInfo{
		{Partition: 0, Leader: "n1", Epoch: 3, Replicas: []string{"n1", "n2"}, ISR: []string{"n1", "n2"}, HighWatermark: 42, LogEndOffset: &logEnd},
		{Partition: 1, Leader: "n2", Epoch: 12, Replicas: []string{"n2", "n1"}, ISR: []string{"n2"}, HighWatermark: 1234567},
		{Partition: 2, Leader: "n2", Epoch: 7, Replicas: []string{"n2"}, ISR: []string{"n2"}, HighWatermark: -1, LogStartOffset: -1},
	}})
	want := "agent " + f.srv.URL + ": node n1, ok\n" + `
AGENT  STATE  CLIENT-ADDRESS  PEER-ADDRESS
n1     up     127.0.0.1:7070  127.0.0.1:7171
n2     up     127.0.0.1:7071  127.0.0.1:7172
n3     DOWN   -               -

TOPIC  PARTITION  LEADER  EPOCH  REPLICAS  ISR       HW       LOG-START  UNCOMMITTED  STATE
a      0          n1      3      n1,n2     n1,n2     42       0          3            ok
a      1          n2      12     n2,n1     n2        1234567  0          -            under-replicated
a      2          n2      7      n2        n2        -        -          -            ok
b      0          -       4      n1,n2,n3  -         10       0          -            offline
b      1          n3      9      n1,n2,n3  n3        5        2          -            below-min-isr,not-preferred
b      2          n1      2      n1,n2,n3  n1,n2,n3  0        0          -            moving
(HW, LOG-START, UNCOMMITTED: this agent's replica's; - where it holds none: -addr another agent for those)

3 agent(s), 2 up, 1 DOWN; 2 topic(s), 6 partition(s), 1 offline, 1 below-min-isr, 1 under-replicated, 1 not led by their preferred replica, 1 being moved
`
	jsonOut := checkStatus(t, f, want)
	var st struct {
		Agent struct {
			NodeID string `json:"node_id"`
		} `json:"agent"`
		Agents []struct {
			NodeID string `json:"node_id"`
			Up     bool   `json:"up"`
		} `json:"agents"`
		Topics []struct {
			Name       string `json:"name"`
			Partitions []struct {
				HighWatermark *int64 `json:"high_watermark"`
				State         string `json:"state"`
			} `json:"partitions"`
		} `json:"topics"`
	}
	if err := json.Unmarshal(jsonOut, &st); err != nil {
		t.Fatalf("status -format json: %v\n%s", err, jsonOut)
	}
	if st.Agent.NodeID != "n1" || len(st.Agents) != 3 || !st.Agents[0].Up || st.Agents[2].NodeID != "n3" || st.Agents[2].Up ||
		len(st.Topics) != 2 || st.Topics[0].Name != "a" || *st.Topics[0].Partitions[0].HighWatermark != 42 ||
		st.Topics[0].Partitions[2].HighWatermark != nil || st.Topics[1].Partitions[0].State != "offline" {
		t.Errorf("status -format json:\n%s", jsonOut)
	}

	empty := newFakeClientAPI(t)
	var out, errb bytes.Buffer
	if code := run([]string{"status", "-addr", empty.srv.URL}, &out, &errb); code != 0 || !strings.HasSuffix(out.String(), "\n\n1 agent(s), 1 up; no topics\n") {
		t.Fatalf("exit %d, stdout %q", code, out.String())
	}
}

// checkStatus runs status against f, fails t unless it printed want, and
// returns what status -format json printed.
func checkStatus(t *testing.T, f *fakeClientAPI, want string) []byte {
	t.Helper()
	var out, errb bytes.Buffer
	if code := run([]string{"status", "-addr", f.srv.URL}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	if out.String() != want {
		t.Fatalf("status printed:\n%s\nwant:\n%s", out.String(), want)
	}
	out.Reset()
	if code := run([]string{"status", "-addr", f.srv.URL, "-format", "json"}, &out, &errb); code != 0 {
		t.Fatalf("status -format json: exit %d: %s", code, errb.String())
	}
	return out.Bytes()
}

// TestStatusAgentStates: status marks the agents that take no new replica,
// in maintenance mode (not passing) or being drained, in the table and the
// summary, which it prints also when there is no topic, and says which
// agents run which build when they run more than one (a rolling upgrade).
func TestStatusAgentStates(t *testing.T) {
	f := newFakeClientAPI(t)
	f.live = []client.AgentInfo{{NodeID: "n1", Version: "v2"}, {NodeID: "n2", NotPassing: true, Version: "v2"},
		{NodeID: "n3", Draining: true, Version: "v1"}, {NodeID: "n4", NotPassing: true, Draining: true}}
	want := "agent " + f.srv.URL + ": node n1, ok\n" + `
AGENT  STATE                      CLIENT-ADDRESS  PEER-ADDRESS
n1     up                         -               -
n2     up, not-passing            -               -
n3     up, draining               -               -
n4     up, not-passing, draining  -               -

4 agent(s), 4 up, 2 not passing every Consul check (maintenance mode, a warning: no new replicas there), 2 being drained (no new replicas there), 3 versions running (unknown on n4; v1 on n3; v2 on n1,n2); no topics
`
	jsonOut := checkStatus(t, f, want)
	var st struct {
		Agents []struct {
			NodeID     string `json:"node_id"`
			NotPassing bool   `json:"not_passing"`
			Draining   bool   `json:"draining"`
			Version    string `json:"version"`
		} `json:"agents"`
	}
	if err := json.Unmarshal(jsonOut, &st); err != nil {
		t.Fatalf("status -format json: %v\n%s", err, jsonOut)
	}
	if len(st.Agents) != 4 || st.Agents[0].Draining || !st.Agents[2].Draining || st.Agents[2].NotPassing || !st.Agents[3].Draining || !st.Agents[3].NotPassing ||
		st.Agents[0].Version != "v2" || st.Agents[3].Version != "" {
		t.Errorf("status -format json:\n%s", jsonOut)
	}
}

// runData runs produce or consume with ctx and stdin, as run would.
func runData(ctx context.Context, args []string, stdin string) (int, string, string) {
	var out, errb bytes.Buffer
	var err error
	switch args[0] {
	case "produce":
		err = produce(ctx, args[1:], strings.NewReader(stdin), &out, &errb)
	case "consume":
		err = consume(ctx, args[1:], &out, &errb)
	}
	if err != nil && !errors.Is(err, flag.ErrHelp) {
		errb.WriteString(err.Error() + "\n")
	}
	return exitCodeOf(err), out.String(), errb.String()
}

func threePartitions(name string) client.TopicInfo {
	info := client.TopicInfo{Name: name}
	for p := range 3 {
		info.Partitions = append(info.Partitions, client.PartitionInfo{Partition: p, Leader: "n1", Epoch: 2, Replicas: []string{"n1"}, ISR: []string{"n1"}})
	}
	return info
}

func TestProduceAndConsume(t *testing.T) {
	f := newFakeClientAPI(t)
	f.addTopic(threePartitions("t"))
	addr := f.srv.URL
	ctx := context.Background()
	keyed := client.PartitionForKey([]byte("user-7"), 3)
	cases := []struct {
		cliCase
		stdin string
		query string // of the last produce request, when set
	}{
		{cliCase{"lines to one partition", []string{"produce", "-addr", addr, "-topic", "t", "-partition", "1"}, 0,
			[]string{"produced 3 record(s) to topic t\n  partition 1: offsets 0-2 (3 record(s))\n"}, nil},
			"a\nb\n\nc <&>\n", "acks=all&partition=1&timeout=5s"},
		{cliCase{"keyed", []string{"produce", "-addr", addr, "-topic", "t", "-key", "user-7", "-acks", "1", "-compression", "gzip"}, 0,
			[]string{"produced 2 record(s)", "partition " + string(rune('0'+keyed)) + ": offsets 0-1"}, nil},
			"x\ny", "acks=1&partition=" + string(rune('0'+keyed)) + "&timeout=5s"},
		{cliCase{"acks 0", []string{"produce", "-addr", addr, "-topic", "t", "-partition", "2", "-acks", "0"}, 0,
			[]string{"sent 1 record(s) to topic t (acks=0: offsets are not reported)\n  partition 2: 1 record(s)\n"}, nil},
			"z\n", "acks=0&partition=2&timeout=5s"},
		{cliCase{"nothing to send", []string{"produce", "-addr", addr, "-topic", "t"}, 0, []string{"produced 0 record(s)"}, nil}, "", ""},
		{cliCase{"bad acks", []string{"produce", "-addr", addr, "-topic", "t", "-acks", "2"}, 2, nil, []string{`acks "2"`}}, "", ""},
		{cliCase{"no topic", []string{"produce", "-addr", addr}, 2, nil, []string{"-topic is required"}}, "", ""},
		{cliCase{"bad compression", []string{"produce", "-addr", addr, "-topic", "t", "-compression", "rar"}, 2, nil, []string{"-compression"}}, "", ""},
		{cliCase{"unknown topic", []string{"produce", "-addr", addr, "-topic", "nope"}, 1, nil, []string{"line 1", "unknown_topic"}}, "a\n", ""},
		{cliCase{"unknown partition", []string{"produce", "-addr", addr, "-topic", "t", "-partition", "7"}, 1, nil,
			[]string{"1 record(s) not written", "unknown_partition", "1 of 1 record(s) not acknowledged"}}, "a\n", ""},
		{cliCase{"line too long", []string{"produce", "-addr", addr, "-topic", "t", "-partition", "0", "-max-line-bytes", "4"}, 1,
			[]string{"produced 1 record(s)"}, []string{"after line 1: longer than -max-line-bytes 4"}}, "abcd\nabcdef\n", ""},

		{cliCase{"consume raw", []string{"consume", "-addr", addr, "-topic", "t", "-partition", "1"}, 0, []string{"a\nb\nc <&>\n"}, nil}, "", ""},
		{cliCase{"consume from an offset", []string{"consume", "-addr", addr, "-topic", "t", "-partition", "1", "-from", "2"}, 0, []string{"c <&>\n"}, nil}, "", ""},
		{cliCase{"consume ndjson", []string{"consume", "-addr", addr, "-topic", "t", "-partition", "1", "-format", "ndjson"}, 0,
			[]string{`"offset":0,`, `"key":null,"value":"a"}` + "\n", `"partition":1,"offset":2,`, `"value":"c <&>"}` + "\n"}, nil}, "", ""},
		{cliCase{"consume keyed", []string{"consume", "-addr", addr, "-topic", "t", "-partition", string(rune('0' + keyed)), "-format", "ndjson"}, 0,
			[]string{`"key":"user-7","value":"x"}`, `"key":"user-7","value":"y"}`}, nil}, "", ""},
		{cliCase{"consume from latest", []string{"consume", "-addr", addr, "-topic", "t", "-partition", "1", "-from", "latest"}, 0, nil, nil}, "", ""},
		{cliCase{"consume out of range", []string{"consume", "-addr", addr, "-topic", "t", "-partition", "1", "-from", "99"}, 1, nil,
			[]string{"fake: offset_out_of_range: the log holds offsets 0 to 2 (log start 0, high watermark 3); -from earliest or -from latest start inside it\n"}}, "", ""},
		{cliCase{"consume bad from", []string{"consume", "-addr", addr, "-topic", "t", "-from", "-3"}, 2, nil, []string{"-from"}}, "", ""},
		{cliCase{"consume bad format", []string{"consume", "-addr", addr, "-topic", "t", "-format", "xml"}, 2, nil, []string{"-format"}}, "", ""},
		{cliCase{"consume no topic", []string{"consume", "-addr", addr}, 2, nil, []string{"-topic is required"}}, "", ""},
		{cliCase{"consume bad partition", []string{"consume", "-addr", addr, "-topic", "t", "-partition", "-2"}, 2, nil, []string{"partition -2"}}, "", ""},
		{cliCase{"consume every partition", []string{"consume", "-addr", addr, "-topic", "t", "-format", "ndjson"}, 0,
			[]string{`"partition":1,"offset":0,`, `"partition":1,"offset":2,`, `"partition":2,"offset":0,`, `"partition":` + string(rune('0'+keyed)) + `,"offset":1,`}, nil}, "", ""},
		{cliCase{"consume unknown topic", []string{"consume", "-addr", addr, "-topic", "nope"}, 1, nil,
			[]string{"fake: unknown_topic: 'logagent topic list' shows the topics there are\n"}}, "", ""},
		{cliCase{"consume -n across partitions", []string{"consume", "-addr", addr, "-topic", "t", "-n", "4", "-format", "json"}, 0,
			[]string{`"offset":`}, nil}, "", ""},
		{cliCase{"consume bad -n", []string{"consume", "-addr", addr, "-topic", "t", "-n", "-1"}, 2, nil, []string{"-n must not be negative"}}, "", ""},
		{cliCase{"consume -n with -group", []string{"consume", "-addr", addr, "-topic", "t", "-group", "g", "-n", "1"}, 2, nil,
			[]string{"-n and -group exclude each other"}}, "", ""},
		{cliCase{"consume format string", []string{"consume", "-addr", addr, "-topic", "t", "-partition", "1", "-from", "2", "-format", `%t/%p/%o %K:%k %S:%s [%h] 100%%\t.\n`}, 0,
			[]string{"t/1/2 -1: 5:c <&> [] 100%\t.\n"}, nil}, "", ""},
		{cliCase{"consume bad format verb", []string{"consume", "-addr", addr, "-topic", "t", "-format", "%q"}, 2, nil, []string{"unknown verb %q"}}, "", ""},
		{cliCase{"produce keys and headers", []string{"produce", "-addr", addr, "-topic", "t", "-partition", "2", "-K", ":", "-H", "source=cli", "-H", "empty="}, 0,
			[]string{"produced 3 record(s) to topic t\n  partition 2: offsets 1-3 (3 record(s))\n"}, nil}, "user-1:hello:there\nno delimiter\n:empty key\n", ""},
		{cliCase{"consume keys and headers", []string{"consume", "-addr", addr, "-topic", "t", "-partition", "2", "-from", "1", "-format", `%k|%s|%h\n`}, 0,
			[]string{"user-1|hello:there|source=cli,empty=\n|no delimiter|source=cli,empty=\n|empty key|source=cli,empty=\n"}, nil}, "", ""},
		{cliCase{"consume keys as json", []string{"consume", "-addr", addr, "-topic", "t", "-partition", "2", "-from", "2", "-n", "2", "-format", "json"}, 0,
			[]string{`"key":null,"value":"no delimiter","headers":{"empty":"","source":"cli"}}` + "\n" + `{"partition":2,"offset":3,`, `"key":"","value":"empty key"`}, nil}, "", ""},
		{cliCase{"produce bad header", []string{"produce", "-addr", addr, "-topic", "t", "-H", "novalue"}, 2, nil, []string{`-H "novalue": want name=value`}}, "", ""},
		{cliCase{"produce -key and -K", []string{"produce", "-addr", addr, "-topic", "t", "-key", "k", "-K", ":"}, 2, nil, []string{"-key and -K exclude each other"}}, "", ""},
		{cliCase{"produce to no agent", []string{"produce", "-addr", "127.0.0.1:1", "-topic", "t", "-partition", "0"}, 1, nil,
			[]string{"cannot reach the agent at http://127.0.0.1:1 (dial tcp 127.0.0.1:1: connect: connection refused): is the agent running? -addr or $LOGAGENT_ADDR names another\n"}}, "a\n", ""},
		{cliCase{"consume from no agent", []string{"consume", "-addr", "127.0.0.1:1", "-topic", "t", "-partition", "0"}, 1, nil,
			[]string{"cannot reach the agent at http://127.0.0.1:1", "LOGAGENT_ADDR"}}, "", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			before := len(f.produceQueries())
			code, stdout, stderr := runData(ctx, c.args, c.stdin)
			checkCLI(t, c.cliCase, code, stdout, stderr)
			if c.query != "" {
				qs := f.produceQueries()
				if len(qs) == before || qs[len(qs)-1] != c.query {
					t.Errorf("produce queries %v, want the last to be %q", qs[before:], c.query)
				}
			}
		})
	}
	// -n counts records over every partition read side by side.
	for _, n := range []int{1, 4, 7} {
		code, stdout, stderr := runData(ctx, []string{"consume", "-addr", addr, "-topic", "t", "-n", strconv.Itoa(n)}, "")
		if lines := strings.Count(stdout, "\n"); code != 0 || lines != n {
			t.Errorf("consume -n %d: exit %d, %d lines:\n%s\nstderr: %s", n, code, lines, stdout, stderr)
		}
	}
	// Consuming from latest prints nothing, and only exact output counts.
	if _, stdout, _ := runData(ctx, []string{"consume", "-addr", addr, "-topic", "t", "-partition", "1", "-from", "latest"}, ""); stdout != "" {
		t.Errorf("consume -from latest printed %q", stdout)
	}
	if _, stdout, _ := runData(ctx, []string{"consume", "-addr", addr, "-topic", "t", "-partition", "1"}, ""); stdout != "a\nb\nc <&>\n" {
		t.Errorf("consume printed %q", stdout)
	}
}

// TestConsumeSaysWhatItRetries: a fetch the client retries is reported on
// stderr, once per cause however often it is retried, and the records come
// once the agent answers; without an answer within -timeout, consume fails
// with the last attempt's cause.
func TestConsumeSaysWhatItRetries(t *testing.T) {
	f := newFakeClientAPI(t)
	f.addTopic(threePartitions("t"))
	addr := f.srv.URL
	if code, _, stderr := runData(context.Background(), []string{"produce", "-addr", addr, "-topic", "t", "-partition", "0"}, "one\n"); code != 0 {
		t.Fatal(stderr)
	}
	note := "logagent consume: fake: leader_not_available (leader_not_available); retrying until -timeout "

	f.mu.Lock()
	f.unavailable = 3
	f.mu.Unlock()
	code, stdout, stderr := runData(context.Background(), []string{"consume", "-addr", addr, "-topic", "t", "-partition", "0"}, "")
	if code != 0 || stdout != "one\n" || strings.Count(stderr, note+"10s\n") != 1 {
		t.Errorf("exit %d, stdout %q, stderr %q; want 0, one, and the retry said once", code, stdout, stderr)
	}

	f.mu.Lock()
	f.unavailable = 1 << 20
	f.mu.Unlock()
	start := time.Now()
	code, _, stderr = runData(context.Background(), []string{"consume", "-addr", addr, "-topic", "t", "-partition", "0", "-timeout", "1s"}, "")
	if took := time.Since(start); code != 1 || took > 4*time.Second || !strings.Contains(stderr, note+"1s\n") ||
		!strings.HasSuffix(stderr, "\ngave up retrying after -timeout 1s: fake: leader_not_available (leader_not_available): 'logagent status' shows the agents and leaders; try again once they are up\n") {
		t.Errorf("exit %d after %s, stderr %q", code, took, stderr)
	}
}

// syncBuffer is a bytes.Buffer that a command writes while the test reads.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func TestConsumeFollow(t *testing.T) {
	f := newFakeClientAPI(t)
	f.addTopic(threePartitions("t"))
	addr := f.srv.URL
	if code, _, stderr := runData(context.Background(), []string{"produce", "-addr", addr, "-topic", "t", "-partition", "0"}, "one\n"); code != 0 {
		t.Fatal(stderr)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out syncBuffer
	done := make(chan error, 1)
	go func() {
		done <- consume(ctx, []string{"-addr", addr, "-topic", "t", "-follow", "-wait", "50ms"}, &out, &bytes.Buffer{})
	}()
	waitFor := func(want string) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for out.String() != want {
			if time.Now().After(deadline) {
				t.Fatalf("consume -follow printed %q, want %q", out.String(), want)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	waitFor("one\n")
	if code, _, stderr := runData(context.Background(), []string{"produce", "-addr", addr, "-topic", "t", "-partition", "0"}, "two\nthree\n"); code != 0 {
		t.Fatal(stderr)
	}
	waitFor("one\ntwo\nthree\n")
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("consume -follow ended with %v after Ctrl-C", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("consume -follow did not stop")
	}
}

func TestWriteNDJSON(t *testing.T) {
	ts := time.UnixMilli(1_700_000_000_123)
	cases := []struct {
		name string
		r    client.Record
		want string
	}{
		{"text", client.Record{Partition: 2, Offset: 7, Timestamp: ts, Key: []byte("k"), Value: []byte(`say "<hi>" & go`)},
			`{"partition":2,"offset":7,"timestamp":1700000000123,"key":"k","value":"say \"<hi>\" & go"}`},
		{"nulls and empties", client.Record{Timestamp: ts, Key: nil, Value: []byte{}},
			`{"partition":0,"offset":0,"timestamp":1700000000123,"key":null,"value":""}`},
		{"binary", client.Record{Timestamp: ts, Key: []byte{0xff}, Value: nil},
			`{"partition":0,"offset":0,"timestamp":1700000000123,"key_base64":"/w==","value":null}`},
		{"headers", client.Record{Timestamp: ts, Value: []byte("v"), Headers: []client.Header{
			{Key: "z", Value: []byte("last")}, {Key: "a", Value: nil}, {Key: "bin", Value: []byte{0xc3, 0x28}},
		}}, `{"partition":0,"offset":0,"timestamp":1700000000123,"key":null,"value":"v","headers":{"a":null,"z":"last"},"headers_base64":{"bin":"wyg="}}`},
	}
	for _, c := range cases {
		var buf bytes.Buffer
		w := bufio.NewWriter(&buf)
		if err := writeNDJSON(w, c.r); err != nil {
			t.Fatal(err)
		}
		_ = w.Flush()
		if got := strings.TrimSuffix(buf.String(), "\n"); got != c.want {
			t.Errorf("%s:\n got %s\nwant %s", c.name, got, c.want)
		}
		if !json.Valid(buf.Bytes()) {
			t.Errorf("%s: not valid JSON: %s", c.name, buf.String())
		}
	}
}

// TestProduceIdempotence checks what produce sends: idempotent by default
// (a producer id per run, sequences from 0), not with -idempotent=false or
// with -acks below all, and -idempotent with -acks 1 is bad usage.
func TestProduceIdempotence(t *testing.T) {
	f := newFakeClientAPI(t)
	f.addTopic(threePartitions("t"))
	addr := f.srv.URL
	cases := []struct {
		cliCase
		stdin string
		// the producer headers of each produce request of the run,
		// "id/epoch/sequence", or "" without them
		producers []string
	}{
		{cliCase{"default", []string{"produce", "-addr", addr, "-topic", "t", "-partition", "0"}, 0,
			[]string{"produced 2 record(s)", "partition 0: offsets 0-1"}, nil}, "a\nb\n", []string{"101/0/0"}},
		{cliCase{"a second run, a second id", []string{"produce", "-addr", addr, "-topic", "t", "-partition", "0", "-linger", "0", "-batch-bytes", "80"}, 0,
			[]string{"produced 3 record(s)", "partition 0: offsets 2-4"}, nil}, "c\nd\ne\n", []string{"102/0/0", "102/0/1", "102/0/2"}},
		{cliCase{"asked for", []string{"produce", "-addr", addr, "-topic", "t", "-partition", "1", "-idempotent"}, 0,
			[]string{"produced 1 record(s)"}, nil}, "f\n", []string{"103/0/0"}},
		{cliCase{"turned off", []string{"produce", "-addr", addr, "-topic", "t", "-partition", "1", "-idempotent=false"}, 0,
			[]string{"produced 1 record(s)", "partition 1: offsets 1-1"}, nil}, "g\n", []string{""}},
		{cliCase{"acks 1", []string{"produce", "-addr", addr, "-topic", "t", "-partition", "1", "-acks", "1"}, 0,
			[]string{"produced 1 record(s)"}, nil}, "h\n", []string{""}},
		{cliCase{"idempotent needs acks all", []string{"produce", "-addr", addr, "-topic", "t", "-idempotent", "-acks", "1"}, 2, nil,
			[]string{"idempotence needs acks=all"}}, "i\n", nil},
		{cliCase{"help says what it means", []string{"produce", "-h"}, 0, nil,
			[]string{"-idempotent", "exactly-once appends", "does not stop a second run from writing the lines again"}}, "", nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			before := len(f.produceProducers())
			code, stdout, stderr := runData(context.Background(), c.args, c.stdin)
			checkCLI(t, c.cliCase, code, stdout, stderr)
			if got := f.produceProducers()[before:]; !slices.Equal(got, c.producers) {
				t.Errorf("producer headers %q, want %q", got, c.producers)
			}
		})
	}
}
