package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/logagent/logagent/client"
)

// startDev runs `logagent dev` (with extra flags) on shifted ports (so that it does not clash
// with a developer's own `make dev`) and returns once its banner says the
// cluster is up. The shifted ports share their range with the ports that
// tests of other packages, running at the same time, take from freeport:
// when dev finds one of its ports taken (it checks them all before it
// starts anything), another offset is tried.
func startDev(t *testing.T, extra ...string) (p *proc, dir string, offset int) {
	t.Helper()
	consulBin := os.Getenv("LOGAGENT_CONSUL_BIN")
	if consulBin == "" {
		consulBin = filepath.Join("..", "..", "bin", "consul")
	}
	if _, err := os.Stat(consulBin); err != nil {
		t.Fatalf("%s: %v: run `make consul`", consulBin, err)
	}
	seed := time.Now().UnixNano()
	rng := rand.New(rand.NewSource(seed))
	for attempt := 1; ; attempt++ {
		offset = 1000 + rng.Intn(90)*100 // ports stay below the ephemeral range
		t.Logf("port offset %d (seed %d)", offset, seed)
		dir = filepath.Join(t.TempDir(), "dev")
		p = startProc(t, nil, append([]string{"dev", "-dir", dir, "-port-offset", strconv.Itoa(offset), "-consul-bin", consulBin}, extra...)...)
		var portsTaken bool
		waitUntil(t, 90*time.Second, "the banner", func() bool {
			if !p.running() {
				if portsTaken = strings.Contains(p.output(), "are in use"); portsTaken {
					return true
				}
				t.Fatalf("logagent dev exited:\n%s", p.output())
			}
			return strings.Contains(p.output(), "logagent dev cluster is up")
		})
		if !portsTaken {
			return p, dir, offset
		}
		if attempt == 5 {
			t.Fatalf("logagent dev found its ports taken at 5 offsets:\n%s", p.output())
		}
		t.Logf("ports taken, trying another offset: %s", strings.TrimSpace(p.output()))
	}
}

// readmeTour returns the commands of README.md's "A short tour", as a user
// would paste them: one per line, continuation lines joined, comment lines
// kept (the shell ignores them; the test checks the URL of one).
func readmeTour(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	i := strings.Index(s, "\n## A short tour\n")
	if i < 0 {
		t.Fatal(`README.md has no "## A short tour" section`)
	}
	s = s[i:]
	start := strings.Index(s, "\n```sh\n")
	if start < 0 {
		t.Fatal("README.md's tour has no ```sh block")
	}
	s = s[start+len("\n```sh\n"):]
	end := strings.Index(s, "\n```")
	if end < 0 {
		t.Fatal("README.md's tour block does not end")
	}
	var lines []string
	var cur strings.Builder
	for line := range strings.Lines(s[:end] + "\n") {
		line = strings.TrimRight(line, "\n")
		if rest, ok := strings.CutSuffix(line, `\`); ok {
			cur.WriteString(rest)
			continue
		}
		cur.WriteString(line)
		if strings.TrimSpace(cur.String()) != "" {
			lines = append(lines, cur.String())
		}
		cur.Reset()
	}
	return lines
}

// tourLocal makes a tour line run here: bin/logagent is the binary under
// test, kcat the one found, and each 127.0.0.1 port is shifted by the dev
// cluster's offset (the commands' default address is, through
// LOGAGENT_ADDR).
func tourLocal(line, logagent, kcat string, offset int) string {
	line = strings.ReplaceAll(line, "bin/logagent ", logagent+" ")
	if rest, ok := strings.CutPrefix(line, "kcat "); ok {
		line = kcat + " " + rest
	}
	return regexp.MustCompile(`127\.0\.0\.1:(\d+)`).ReplaceAllStringFunc(line, func(m string) string {
		port, _ := strconv.Atoi(strings.TrimPrefix(m, "127.0.0.1:"))
		return fmt.Sprintf("127.0.0.1:%d", port+offset)
	})
}

// tourCheck checks what a user sees after one line of the tour.
type tourCheck struct {
	// prefix picks the tour line, as README.md has it (without a leading
	// "bin/logagent ").
	prefix string
	check  func(t *testing.T, stdout, stderr string)
}

// TestReadmeTour follows README.md's "A short tour" line by line, as
// written there, against `logagent dev`, and checks what each line shows.
// A line this test has no check for fails it: a change to the tour comes
// with its check.
func TestReadmeTour(t *testing.T) {
	curl, err := exec.LookPath("curl")
	if err != nil {
		t.Fatal("the tour uses curl, which is not installed: `make curl` (as root: apt-get install curl)")
	}
	kcat := os.Getenv("LOGAGENT_KCAT")
	if kcat == "" {
		if kcat, err = exec.LookPath("kcat"); err != nil {
			t.Fatal("the tour uses kcat, which is not installed: `make kcat` (as root: apt-get install kcat), or set LOGAGENT_KCAT")
		}
	}
	t.Logf("curl %s, kcat %s", curl, kcat)
	logagent := logagentBin(t)
	p, _, offset := startDev(t)
	for i := range 3 {
		url := fmt.Sprintf("http://127.0.0.1:%d/v1/health", 7070+offset+i)
		waitUntil(t, 30*time.Second, url, func() bool { code, _ := httpGet(url); return code == 200 })
	}

	user1 := client.PartitionForKey([]byte("user-1"), 3)
	user2 := client.PartitionForKey([]byte("user-2"), 3)
	// Every record the tour writes, as "partition key=value header".
	want := []string{
		fmt.Sprintf("%d user-1=hello ", user1), fmt.Sprintf("%d user-1=world ", user1),
		fmt.Sprintf("%d user-2=hi source=tour", user2),
		"0 =one ", "0 =two ",
	}
	checks := []tourCheck{
		{"topic create -name orders -partitions 3", func(t *testing.T, stdout, stderr string) {
			mustHave(t, stdout, "created topic orders: 3 partition(s), replication factor 3, min_insync_replicas 2\n", "every partition has a leader\n")
			mustNotHave(t, stderr, "WARNING")
		}},
		{"status", func(t *testing.T, stdout, _ string) {
			mustHave(t, stdout, "AGENT  STATE", "\nn1     up ", "\nn2     up ", "\nn3     up ",
				"TOPIC   PARTITION  LEADER", "\norders  0 ", "\norders  1 ", "\norders  2 ", "\n3 agent(s), 3 up; ")
			mustNotHave(t, stdout, "DOWN", "offline")
		}},
		{"# the status page", func(t *testing.T, _, _ string) {}}, // its URL is checked below
		{"printf 'hello\\nworld\\n' | bin/logagent produce -topic orders -key user-1", func(t *testing.T, stdout, _ string) {
			mustHave(t, stdout, fmt.Sprintf("produced 2 record(s) to topic orders\n  partition %d: offsets 0-1 (2 record(s))\n", user1))
		}},
		{"printf 'user-2:hi\\n' | bin/logagent produce -topic orders -K : -H source=tour", func(t *testing.T, stdout, _ string) {
			first := 0
			if user2 == user1 {
				first = 2
			}
			mustHave(t, stdout, fmt.Sprintf("produced 1 record(s) to topic orders\n  partition %d: offsets %d-%d (1 record(s))\n", user2, first, first))
		}},
		{"printf 'one\\ntwo\\n' | curl", func(t *testing.T, stdout, _ string) {
			var answer struct {
				Partition  int   `json:"partition"`
				BaseOffset int64 `json:"base_offset"`
				Count      int   `json:"count"`
			}
			if err := json.Unmarshal([]byte(stdout), &answer); err != nil || answer.Partition != 0 || answer.Count != 2 {
				t.Errorf("produce answer %q (%v): want 2 records in partition 0", stdout, err)
			}
		}},
		{"curl -s -H 'Accept: application/x-ndjson'", func(t *testing.T, stdout, _ string) {
			var values []string
			for line := range strings.Lines(stdout) {
				var rec struct {
					Value string `json:"value"`
				}
				if err := json.Unmarshal([]byte(line), &rec); err != nil {
					t.Fatalf("fetch line %q: %v", line, err)
				}
				values = append(values, rec.Value)
			}
			// Partition 0 through the second agent: the curl records, after
			// the keyed ones when their key hashes to partition 0.
			if !slices.Contains(values, "one") || !slices.Contains(values, "two") || values[len(values)-1] != "two" {
				t.Errorf("partition 0 read through the second agent: %q, want it to end with one, two", values)
			}
		}},
		{"consume -topic orders", func(t *testing.T, stdout, _ string) {
			got := strings.Split(strings.TrimSuffix(stdout, "\n"), "\n")
			// Drop the offsets: "0/3 user-1=hello " becomes "0 user-1=hello ".
			for i, l := range got {
				p, rest, _ := strings.Cut(l, "/")
				_, rest, _ = strings.Cut(rest, " ")
				got[i] = p + " " + rest
			}
			slices.Sort(got)
			sorted := slices.Sorted(slices.Values(want))
			if !slices.Equal(got, sorted) {
				t.Errorf("consume printed:\n%s\nwant every record, as (partition, key, value, headers) %q", stdout, sorted)
			}
		}},
		{"kcat ", func(t *testing.T, stdout, _ string) {
			got := strings.Split(strings.TrimSuffix(stdout, "\n"), "\n")
			slices.Sort(got)
			if w := []string{"hello", "hi", "one", "two", "world"}; !slices.Equal(got, w) {
				t.Errorf("kcat printed:\n%s\nwant the values %q", stdout, w)
			}
		}},
	}

	lines := readmeTour(t)
	if len(lines) != len(checks) {
		t.Errorf("the tour has %d lines, the test checks %d: %q", len(lines), len(checks), lines)
	}
	for i, line := range lines {
		local := tourLocal(line, logagent, kcat, offset)
		if i >= len(checks) || !strings.HasPrefix(strings.TrimPrefix(line, "bin/logagent "), checks[i].prefix) {
			t.Fatalf("tour line %d %q: the test has no check for it", i+1, line)
		}
		if strings.HasPrefix(line, "#") {
			if m := regexp.MustCompile(`http://\S+`).FindString(local); m != "" {
				if code, body := httpGet(m); code != 200 || !strings.Contains(body, "<html") {
					t.Errorf("tour line %d: %s answered %d %.200q", i+1, m, code, body)
				}
			}
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		cmd := exec.CommandContext(ctx, "sh", "-c", local)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		// The commands' default agent, 7070, shifted as the ports are.
		cmd.Env = append(os.Environ(), fmt.Sprintf("%s=http://127.0.0.1:%d", client.AddrEnv, 7070+offset))
		// Its own process group, so that nothing it starts outlives it.
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
		err := cmd.Run()
		cancel()
		t.Logf("$ %s\n%s%s", local, stdout.String(), stderr.String())
		if err != nil {
			t.Fatalf("tour line %d %q: %v\nstdout:\n%s\nstderr:\n%s", i+1, line, err, stdout.String(), stderr.String())
		}
		t.Run(fmt.Sprintf("line %d", i+1), func(t *testing.T) { checks[i].check(t, stdout.String(), stderr.String()) })
	}

	addr := fmt.Sprintf("http://127.0.0.1:%d", 7070+offset)
	t.Run("every partition", func(t *testing.T) { consumeEveryPartition(t, addr, len(want)) })
	t.Run("one-line errors", func(t *testing.T) { oneLineErrors(t, addr) })
	t.Run("no fake zeros", func(t *testing.T) { noFakeZeros(t, addr) })

	p.signal(syscall.SIGINT)
	if code := p.wait(60 * time.Second); code != 0 {
		t.Errorf("logagent dev exit code %d after Ctrl-C, want 0", code)
	}
}

func mustHave(t *testing.T, s string, subs ...string) {
	t.Helper()
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			t.Errorf("lacks %q:\n%s", sub, s)
		}
	}
}

func mustNotHave(t *testing.T, s string, subs ...string) {
	t.Helper()
	for _, sub := range subs {
		if strings.Contains(s, sub) {
			t.Errorf("has %q:\n%s", sub, s)
		}
	}
}

// runCLI runs the binary under test with stdin and returns its exit code
// and output.
func runCLI(t *testing.T, stdin string, args ...string) (int, string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, logagentBin(t), args...)
	cmd.Stdin = strings.NewReader(stdin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var exitErr *exec.ExitError
	switch {
	case err == nil:
		return 0, stdout.String(), stderr.String()
	case errors.As(err, &exitErr):
		return exitErr.ExitCode(), stdout.String(), stderr.String()
	}
	t.Fatalf("logagent %s: %v", strings.Join(args, " "), err)
	return 0, "", ""
}

// consumeEveryPartition: consume -topic without -partition prints every
// record of a 3-partition topic (issue 20's acceptance 3), after records
// with 30 keys went to all three of orders' partitions.
func consumeEveryPartition(t *testing.T, addr string, already int) {
	var lines strings.Builder
	spread := map[int]int{}
	for i := range 30 {
		key := "k" + strconv.Itoa(i)
		fmt.Fprintf(&lines, "%s:v%d\n", key, i)
		spread[client.PartitionForKey([]byte(key), 3)]++
	}
	if len(spread) != 3 {
		t.Fatalf("the keys reach partitions %v, want all three", spread)
	}
	if code, _, stderr := runCLI(t, lines.String(), "produce", "-addr", addr, "-topic", "orders", "-K", ":"); code != 0 {
		t.Fatalf("produce: exit %d: %s", code, stderr)
	}
	code, stdout, stderr := runCLI(t, "", "consume", "-addr", addr, "-topic", "orders", "-format", "json")
	if code != 0 {
		t.Fatalf("consume: exit %d: %s", code, stderr)
	}
	perPartition := map[int]int{}
	values := map[string]bool{}
	for line := range strings.Lines(stdout) {
		var rec struct {
			Partition int    `json:"partition"`
			Value     string `json:"value"`
		}
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("line %q: %v", line, err)
		}
		perPartition[rec.Partition]++
		values[rec.Value] = true
	}
	for i := range 30 {
		if !values["v"+strconv.Itoa(i)] {
			t.Errorf("consume did not print v%d", i)
		}
	}
	if total := perPartition[0] + perPartition[1] + perPartition[2]; total != already+30 || len(perPartition) != 3 {
		t.Errorf("consume printed %d records %v, want %d over the 3 partitions:\n%s", total, perPartition, already+30, stdout)
	}
}

// oneLineErrors: the agent's errors come as one line with what to do next.
func oneLineErrors(t *testing.T, addr string) {
	cases := []struct {
		args []string
		want *regexp.Regexp
	}{
		{[]string{"topic", "describe", "nope"},
			regexp.MustCompile(`^logagent topic: no topic "nope": 'logagent topic list' shows the topics there are\n$`)},
		{[]string{"consume", "-topic", "orders", "-partition", "0", "-from", "999"},
			regexp.MustCompile(`^logagent consume: offset 999 is outside the log: the log holds offsets 0 to \d+ \(log start 0, high watermark \d+\); -from earliest or -from latest start inside it\n$`)},
		{[]string{"topic", "create", "orders"},
			regexp.MustCompile(`^logagent topic: topic orders exists: 'logagent topic describe' shows it\n$`)},
	}
	for _, c := range cases {
		code, _, stderr := runCLI(t, "", append(c.args, "-addr", addr)...)
		if code != 1 || !c.want.MatchString(stderr) {
			t.Errorf("logagent %s: exit %d, stderr %q; want 1 and %s", strings.Join(c.args, " "), code, stderr, c.want)
		}
	}
}

// noFakeZeros: status and describe through one agent print - for the
// positions of partitions that agent holds no replica of, not 0.
func noFakeZeros(t *testing.T, addr string) {
	if code, _, stderr := runCLI(t, "", "topic", "create", "-addr", addr, "-name", "solo", "-partitions", "3", "-replication-factor", "1"); code != 0 {
		t.Fatalf("topic create: exit %d: %s", code, stderr)
	}
	code, stdout, stderr := runCLI(t, "", "topic", "describe", "-addr", addr, "solo")
	if code != 0 {
		t.Fatalf("topic describe: exit %d: %s", code, stderr)
	}
	// Each partition's one replica: n1's rows have positions, the others -.
	rows := regexp.MustCompile(`(?m)^(\d)\s+(n\d)\s+\d+\s+(n\d)\s+\S+\s+(\S+)\s+(\S+)\s+(\S+)\s+ok$`).FindAllStringSubmatch(stdout, -1)
	if len(rows) != 3 {
		t.Fatalf("describe printed:\n%s\nwant 3 partition rows", stdout)
	}
	for _, r := range rows {
		held := r[3] == "n1"
		if dash := r[4] == "-" && r[5] == "-" && r[6] == "-"; dash == held || (held && (r[4] != "0" || r[5] != "0" || r[6] != "0")) {
			t.Errorf("partition %s, replica on %s: HW %s, LOG-START %s, UNCOMMITTED %s; want 0 on n1, - elsewhere:\n%s", r[1], r[3], r[4], r[5], r[6], stdout)
		}
	}
	mustHave(t, stdout, "- where it holds none")
}
