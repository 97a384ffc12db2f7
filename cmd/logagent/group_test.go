package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/logagent/logagent/client"
)

// groupFixture is a fake agent with topic t of three partitions: a, b, c
// in partition 0, "x" then a value that is not UTF-8 in partition 1,
// nothing in partition 2.
func groupFixture(t *testing.T) *fakeClientAPI {
	t.Helper()
	f := newFakeClientAPI(t)
	f.addTopic(threePartitions("t"))
	for _, p := range []struct{ partition, lines string }{{"0", "a\nb\nc\n"}, {"1", "x\n\xff\xfe\n"}} {
		if code, _, stderr := runData(context.Background(), []string{"produce", "-addr", f.srv.URL, "-topic", "t", "-partition", p.partition}, p.lines); code != 0 {
			t.Fatal(stderr)
		}
	}
	return f
}

func (f *fakeClientAPI) committedOf(group string) map[client.TopicPartition]int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	g := f.groups[group]
	if g == nil {
		return nil
	}
	out := map[client.TopicPartition]int64{}
	for tp, o := range g.committed {
		out[tp] = o
	}
	return out
}

func (f *fakeClientAPI) groupMembers(group string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	if g := f.groups[group]; g != nil {
		return len(g.members)
	}
	return 0
}

func TestConsumeGroup(t *testing.T) {
	f := groupFixture(t)
	addr := f.srv.URL
	// Bounded, should a command wait for what it cannot get.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	args := func(extra ...string) []string {
		return append([]string{"consume", "-addr", addr, "-topic", "t"}, extra...)
	}
	cases := []cliCase{
		{"partition with group", args("-group", "g", "-partition", "0"), 2, nil, []string{"-partition and -group exclude each other"}},
		{"offset with group", args("-group", "g", "-from", "3"), 2, nil, []string{"-from 3 with -group", "logagent group reset-offsets g -topic t -to 3"}},
		{"group id too long", args("-group", strings.Repeat("g", 256)), 2, nil, []string{"invalid group or member id"}},
		{"unknown topic", []string{"consume", "-addr", addr, "-topic", "nope", "-group", "g"}, 1, nil, []string{"unknown_topic"}},
		{"no agent", []string{"consume", "-addr", "127.0.0.1:1", "-topic", "t", "-group", "g"}, 1, nil, []string{"cannot reach the agent at http://127.0.0.1:1", "is the agent running?"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			code, stdout, stderr := runData(ctx, c.args, "")
			checkCLI(t, c, code, stdout, stderr)
		})
	}
	if n := f.groupMembers("g"); n != 0 || f.committedOf("g") != nil {
		t.Fatalf("refused commands joined the group: %d member(s), committed %v", n, f.committedOf("g"))
	}

	t.Run("ndjson, every partition, committed and left", func(t *testing.T) {
		code, stdout, stderr := runData(ctx, args("-group", "g", "-format", "ndjson"), "")
		if code != 0 {
			t.Fatalf("exit %d: %s", code, stderr)
		}
		var got []string
		for line := range strings.Lines(stdout) {
			var rec map[string]any
			if err := json.Unmarshal([]byte(line), &rec); err != nil {
				t.Fatalf("line %q: %v", line, err)
			}
			for _, k := range []string{"partition", "offset", "timestamp"} {
				if _, ok := rec[k].(float64); !ok {
					t.Errorf("line %q: %s is not a number", line, k)
				}
			}
			got = append(got, strings.TrimSpace(line))
		}
		// Partitions interleave: compare each partition's lines in order.
		var p0, p1 []string
		for _, l := range got {
			l = l[:strings.Index(l, `,"timestamp"`)] + l[strings.Index(l, `,"key"`):]
			switch {
			case strings.HasPrefix(l, `{"partition":0,`):
				p0 = append(p0, l)
			case strings.HasPrefix(l, `{"partition":1,`):
				p1 = append(p1, l)
			default:
				t.Errorf("line %q", l)
			}
		}
		want0 := []string{`{"partition":0,"offset":0,"key":null,"value":"a"}`, `{"partition":0,"offset":1,"key":null,"value":"b"}`, `{"partition":0,"offset":2,"key":null,"value":"c"}`}
		want1 := []string{`{"partition":1,"offset":0,"key":null,"value":"x"}`, `{"partition":1,"offset":1,"key":null,"value_base64":"//4="}`}
		if !slices.Equal(p0, want0) || !slices.Equal(p1, want1) {
			t.Errorf("partition 0: %q\npartition 1: %q\nwant %q and %q", p0, p1, want0, want1)
		}
		want := map[client.TopicPartition]int64{{Topic: "t", Partition: 0}: 3, {Topic: "t", Partition: 1}: 2}
		got2 := f.committedOf("g")
		delete(got2, client.TopicPartition{Topic: "t", Partition: 2}) // 0, if committed at all
		if fmt.Sprint(got2) != fmt.Sprint(want) {
			t.Errorf("committed %v, want %v", f.committedOf("g"), want)
		}
		if n := f.groupMembers("g"); n != 0 {
			t.Errorf("%d member(s) after the command, want it to leave", n)
		}
	})
	t.Run("again: nothing new", func(t *testing.T) {
		code, stdout, stderr := runData(ctx, args("-group", "g"), "")
		if code != 0 || stdout != "" {
			t.Errorf("exit %d, printed %q (stderr %s): want nothing, the group's offsets are at the end", code, stdout, stderr)
		}
	})
	t.Run("another group from latest", func(t *testing.T) {
		code, stdout, stderr := runData(ctx, args("-group", "late", "-from", "latest"), "")
		if code != 0 || stdout != "" {
			t.Errorf("exit %d, printed %q (stderr %s)", code, stdout, stderr)
		}
		if got := f.committedOf("late"); got[client.TopicPartition{Topic: "t", Partition: 0}] != 3 {
			t.Errorf("committed %v, want t/0 at 3", got)
		}
	})
}

func TestConsumeGroupFollowCommitsOnExit(t *testing.T) {
	f := groupFixture(t)
	addr := f.srv.URL
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out syncBuffer
	done := make(chan error, 1)
	go func() {
		done <- consume(ctx, []string{"-addr", addr, "-topic", "t", "-group", "g", "-follow", "-wait", "50ms"}, &out, &bytes.Buffer{})
	}()
	waitLines := func(n int) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for strings.Count(out.String(), "\n") < n {
			if time.Now().After(deadline) {
				t.Fatalf("printed %q, want %d lines", out.String(), n)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	waitLines(5)
	if code, _, stderr := runData(context.Background(), []string{"produce", "-addr", addr, "-topic", "t", "-partition", "2"}, "late\n"); code != 0 {
		t.Fatal(stderr)
	}
	waitLines(6)
	cancel() // Ctrl-C
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("consume -group -follow ended with %v after Ctrl-C", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("consume -group -follow did not stop")
	}
	want := map[client.TopicPartition]int64{{Topic: "t", Partition: 0}: 3, {Topic: "t", Partition: 1}: 2, {Topic: "t", Partition: 2}: 1}
	if got := f.committedOf("g"); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("committed %v, want %v", got, want)
	}
	if n := f.groupMembers("g"); n != 0 {
		t.Errorf("%d member(s) after Ctrl-C, want it to leave", n)
	}
}

func TestGroupCommands(t *testing.T) {
	f := groupFixture(t)
	addr := f.srv.URL
	if code, _, stderr := runData(context.Background(), []string{"consume", "-addr", addr, "-topic", "t", "-group", "g"}, ""); code != 0 {
		t.Fatal(stderr)
	}
	// A member that stays, holding every partition.
	c, err := client.New(addr)
	if err != nil {
		t.Fatal(err)
	}
	gc, err := c.NewGroupConsumer("busy", []string{"t"}, client.WithMemberID("holder"))
	if err != nil {
		t.Fatal(err)
	}
	defer gc.Close(context.Background())
	deadline := time.Now().Add(10 * time.Second)
	for len(gc.Assigned()) != 3 {
		if time.Now().After(deadline) {
			t.Fatal("the member got no partitions")
		}
		time.Sleep(5 * time.Millisecond)
	}
	cases := []cliCase{
		{"list", []string{"group", "list", "-addr", addr}, 0, []string{"GROUP  EPOCH  MEMBERS\n", "busy   ", "g      "}, nil},
		{"describe", []string{"group", "describe", "-addr", addr, "g"}, 0, []string{
			"group g: epoch ", "coordinator n1, 0 member(s)\n",
			"TOPIC  PARTITION  OWNER  COMMITTED  HW  LAG\n",
			"t      0          -      3          3   0\n",
			"t      1          -      2          2   0\n",
			"t      2          -      0          0   0\n",
		}, nil},
		{"describe with a member", []string{"group", "describe", "-addr", addr, "-group", "busy"}, 0, []string{
			"t      0          holder  -          3   3\n",
			"MEMBER  EPOCH  TOPICS  SESSION-TIMEOUT  ASSIGNED     REVOKING\n",
			"holder  ", "t       10s              t/0,t/1,t/2  -\n",
		}, nil},
		{"describe unknown", []string{"group", "describe", "-addr", addr, "nope"}, 1, nil, []string{"unknown_group", "'logagent group list' shows the groups"}},
		{"describe without a group", []string{"group", "describe", "-addr", addr}, 2, nil, []string{"name the group: -group G, or G as the argument"}},
		{"reset to earliest", []string{"group", "reset-offsets", "-addr", addr, "g", "-topic", "t", "-to", "earliest"}, 0, []string{
			"reset group g, topic t to earliest:\n", "PARTITION  OFFSET\n0          0\n1          0\n2          0\n"}, nil},
		{"reset to an offset", []string{"group", "reset-offsets", "-addr", addr, "g", "-topic", "t", "-to", "1"}, 1, nil, []string{"offset_beyond_high_watermark"}},
		{"reset while a member holds it", []string{"group", "reset-offsets", "-addr", addr, "busy", "-topic", "t", "-to", "latest"}, 1, nil, []string{
			"group_not_empty", "stop the group's consumers of topic t first", "logagent group describe busy"}},
		{"reset bad to", []string{"group", "reset-offsets", "-addr", addr, "g", "-topic", "t", "-to", "soon"}, 2, nil, []string{`-to "soon": want earliest, latest or an offset`}},
		{"reset without topic", []string{"group", "reset-offsets", "-addr", addr, "g", "-to", "0"}, 2, nil, []string{"-topic is required"}},
		{"reset unknown group", []string{"group", "reset-offsets", "-addr", addr, "nope", "-topic", "t", "-to", "0"}, 1, nil, []string{"unknown_group"}},
		{"consume what another member holds", []string{"consume", "-addr", addr, "-topic", "t", "-group", "busy", "-timeout", "1s"}, 1, nil, []string{
			"logagent consume: the group busy gave this member no partition within 1s (others may own them all: 'logagent group describe busy' shows who owns what)\n"}},
		{"delete while a member is in it", []string{"group", "delete", "-addr", addr, "busy"}, 1, nil, []string{
			"group_not_empty", "stop the group's consumers first ('logagent group describe busy' shows who owns what)"}},
		{"delete without a group", []string{"group", "delete", "-addr", addr}, 2, nil, []string{"name the group: -group G, or G as the argument"}},
		{"delete a bad group id", []string{"group", "delete", "-addr", addr, strings.Repeat("g", 256)}, 2, nil, []string{"invalid group or member id"}},
		{"delete", []string{"group", "delete", "-addr", addr, "-group", "g"}, 0, []string{"deleted group g\n"}, nil},
		{"delete again", []string{"group", "delete", "-addr", addr, "g"}, 1, nil, []string{"unknown_group", "'logagent group list' shows the groups"}},
		{"describe once deleted", []string{"group", "describe", "-addr", addr, "g"}, 1, nil, []string{"unknown_group"}},
		{"no subcommand", []string{"group"}, 2, nil, []string{"Usage: logagent group <list|describe|reset-offsets|delete>"}},
		{"unknown subcommand", []string{"group", "remove"}, 2, nil, []string{`unknown subcommand "remove"`}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			code := run(c.args, &out, &errb)
			checkCLI(t, c, code, out.String(), errb.String())
		})
	}
	if got := f.committedOf("g"); len(got) != 0 {
		t.Errorf("after the delete, committed %v", got)
	}
	if n := f.groupMembers("busy"); n != 1 {
		t.Errorf("the refused delete left busy with %d member(s), want 1", n)
	}
}

// failingWriter refuses every write, as a full disk refuses stdout
// redirected to a file.
type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) { return 0, syscall.ENOSPC }

// TestConsumeGroupOutputFailsCommitsNothing: consume -group whose output
// fails leaves the group without committing what it could not print, so
// the group reads those records again. Before, the last commit of its
// Close counted them consumed: lost to the group.
func TestConsumeGroupOutputFailsCommitsNothing(t *testing.T) {
	f := groupFixture(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var stderr bytes.Buffer
	err := consume(ctx, []string{"-addr", f.srv.URL, "-topic", "t", "-group", "g"}, failingWriter{}, &stderr)
	if !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("consume with a failing stdout: %v, want the write's error (stderr %s)", err, stderr.String())
	}
	for tp, o := range f.committedOf("g") {
		if o != 0 {
			t.Errorf("committed %v at %d: records that were never printed count as consumed", tp, o)
		}
	}
	if n := f.groupMembers("g"); n != 0 {
		t.Errorf("%d member(s) after the command, want it to leave", n)
	}
	code, stdout, errOut := runData(ctx, []string{"consume", "-addr", f.srv.URL, "-topic", "t", "-group", "g"}, "")
	if code != 0 || len(strings.Split(strings.TrimSpace(stdout), "\n")) != 5 {
		t.Errorf("the group's next read: exit %d, %q (stderr %s); want the 5 records again", code, stdout, errOut)
	}
}
