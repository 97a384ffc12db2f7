package main

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestReplaceRegion(t *testing.T) {
	const region = "new table\n"
	tests := []struct {
		name    string
		doc     string
		want    string
		wantErr error
	}{
		{"empty document", "", beginMarker + "\nnew table\n" + endMarker + "\n", nil},
		{"no markers: appended after a blank line", "# Benchmarks\n\nstorage figures\n",
			"# Benchmarks\n\nstorage figures\n\n" + beginMarker + "\nnew table\n" + endMarker + "\n", nil},
		{"no final newline", "text", "text\n\n" + beginMarker + "\nnew table\n" + endMarker + "\n", nil},
		{"region replaced, the rest kept byte for byte",
			"# B\n\nbefore\n" + beginMarker + "\nold\nrows\n" + endMarker + "\nafter ✓\n",
			"# B\n\nbefore\n" + beginMarker + "\nnew table\n" + endMarker + "\nafter ✓\n", nil},
		{"end before begin", endMarker + "\n" + beginMarker + "\n", "", errMarkers},
		{"two begins", beginMarker + beginMarker + endMarker, "", errMarkers},
		{"begin without end", "x\n" + beginMarker + "\n", "", errMarkers},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := replaceRegion(tt.doc, region)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("error %v, want %v", err, tt.wantErr)
			}
			if got != tt.want {
				t.Errorf("got\n%q\nwant\n%q", got, tt.want)
			}
		})
	}
}

func TestReplaceRegionIsIdempotent(t *testing.T) {
	doc := "# Benchmarks\n\nother sections\n"
	once, err := replaceRegion(doc, "a\n")
	if err != nil {
		t.Fatal(err)
	}
	twice, err := replaceRegion(once, "a\n")
	if err != nil {
		t.Fatal(err)
	}
	if once != twice {
		t.Errorf("a second run changed the document:\n%q\n%q", once, twice)
	}
}

func TestComparisonRatioAndVerdict(t *testing.T) {
	ms := time.Millisecond
	tests := []struct {
		name      string
		c         comparison
		wantRatio string
		wantGoal  string
		verdict   string
	}{
		{"records met", comparison{Metric: byRecords, Goal: 1.5, Ours: sample{RecordsPerSec: 300}, Theirs: sample{RecordsPerSec: 100}}, "3.00x", "≥ 1.5x", "met"},
		{"records just met", comparison{Metric: byRecords, Goal: 2, Ours: sample{RecordsPerSec: 200}, Theirs: sample{RecordsPerSec: 100}}, "2.00x", "≥ 2x", "met"},
		{"records missed", comparison{Metric: byRecords, Goal: 2, Ours: sample{RecordsPerSec: 150}, Theirs: sample{RecordsPerSec: 100}}, "1.50x", "≥ 2x", "missed"},
		{"MB/s against a limit", comparison{Metric: byMB, Goal: 0.5, Ours: sample{MBPerSec: 1000}, Theirs: sample{MBPerSec: 4000}}, "0.25x", "≥ 0.5x", "missed"},
		{"p99: lower is better", comparison{Metric: byP99, Goal: 1, Ours: sample{P99: 2 * ms}, Theirs: sample{P99: 5 * ms}}, "2.50x", "≥ 1x", "met"},
		{"p99 worse", comparison{Metric: byP99, Goal: 1, Ours: sample{P99: 5 * ms}, Theirs: sample{P99: 4 * ms}}, "0.80x", "≥ 1x", "missed"},
		{"no goal", comparison{Metric: byRecords, Ours: sample{RecordsPerSec: 1}, Theirs: sample{RecordsPerSec: 2}}, "0.50x", "–", "no goal"},
		{"other side not measured", comparison{Metric: byRecords, Goal: 1.5, Ours: sample{RecordsPerSec: 1}}, "–", "≥ 1.5x", "no figure"},
		{"our p99 missing", comparison{Metric: byP99, Goal: 1, Theirs: sample{P99: ms}}, "–", "≥ 1x", "no figure"},
		// An absolute goal decides alone; the ratio is shown beside it.
		{"rate met below the other side", comparison{Metric: byRecords, MinRate: 20000, Ours: sample{RecordsPerSec: 21000}, Theirs: sample{RecordsPerSec: 42000}}, "0.50x", "≥ 20000/s", "met"},
		{"rate missed above the other side", comparison{Metric: byRecords, MinRate: 20000, Ours: sample{RecordsPerSec: 12000}, Theirs: sample{RecordsPerSec: 6000}}, "2.00x", "≥ 20000/s", "missed"},
		{"rate not measured", comparison{Metric: byRecords, MinRate: 20000, Theirs: sample{RecordsPerSec: 6000}}, "0.00x", "≥ 20000/s", "no figure"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.c.TheirsName = "JetStream"
			if got := tt.c.ratioText(); got != tt.wantRatio {
				t.Errorf("ratio %q, want %q", got, tt.wantRatio)
			}
			if got := tt.c.goalText(); got != tt.wantGoal {
				t.Errorf("goal %q, want %q", got, tt.wantGoal)
			}
			if got := tt.c.verdict(); got != tt.verdict {
				t.Errorf("verdict %q, want %q", got, tt.verdict)
			}
		})
	}
}

func TestFormatLatency(t *testing.T) {
	tests := []struct {
		d    time.Duration
		want string
	}{
		{0, "–"},
		{483 * time.Microsecond, "483 µs"},
		{1500 * time.Microsecond, "1.50 ms"},
		{12 * time.Millisecond, "12.00 ms"},
		{10150 * time.Millisecond, "10.15 s"},
	}
	for _, tt := range tests {
		if got := formatLatency(tt.d); got != tt.want {
			t.Errorf("formatLatency(%v) = %q, want %q", tt.d, got, tt.want)
		}
	}
}

func TestRenderRegion(t *testing.T) {
	in := reportInput{
		Date:     time.Date(2026, 11, 29, 12, 30, 0, 0, time.UTC),
		Machine:  "test CPU, 2 cores",
		Duration: 10 * time.Second,
		Rows: []comparison{
			{Group: "produce-r3", Name: "RF 3 acks=all replicated, 1 KiB", TheirsName: "JetStream R3", Metric: byRecords, Goal: 1.5,
				Ours:   sample{RecordsPerSec: 200000, MBPerSec: 204.8, P50: 900 * time.Microsecond, P99: 3 * time.Millisecond, Command: "bin/logagent bench produce -topic t -json", Setup: "cluster"},
				Theirs: sample{RecordsPerSec: 100000, MBPerSec: 102.4, Command: "bin/benchrun -only produce-r3 -duration 10s", Note: "2 errors"}},
		},
		Notes: []string{"consume skipped"},
	}
	got := renderRegion(in)
	for _, want := range []string{
		"2026-11-29 12:30 UTC", "test CPU, 2 cores", "### Produce, three replicas",
		"| RF 3 acks=all replicated, 1 KiB | 200000 | 204.8 | 900 µs | 3.00 ms | JetStream R3 | 100000 | 102.4 | – | – | 2.00x | ≥ 1.5x | met |",
		"`bin/logagent bench produce -topic t -json` (cluster)", "`bin/benchrun -only produce-r3 -duration 10s`",
		"note: 2 errors", "- consume skipped",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("region lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "### Consume") {
		t.Errorf("region has a section for a group without rows:\n%s", got)
	}
}

func TestParseGroups(t *testing.T) {
	all, err := parseGroups("")
	if err != nil || len(all) != len(groupKeys) {
		t.Fatalf("parseGroups(\"\") = %v, %v; want every group", all, err)
	}
	some, err := parseGroups("e2e, limits")
	if err != nil || len(some) != 2 || !some["e2e"] || !some["limits"] {
		t.Fatalf("parseGroups(e2e, limits) = %v, %v", some, err)
	}
	if _, err := parseGroups("produce"); err == nil {
		t.Error("parseGroups accepted an unknown group")
	}
}

func TestLineWatchAcrossWrites(t *testing.T) {
	w := newLineWatch("cluster is up")
	for _, part := range []string{"starting\nlogagent dev clus", "ter i", "s up\n"} {
		select {
		case <-w.seen:
			t.Fatalf("seen before the whole line was written (at %q)", part)
		default:
		}
		if _, err := w.Write([]byte(part)); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-w.seen:
	default:
		t.Fatal("line split across writes was not seen")
	}
	if _, err := w.Write([]byte("cluster is up again\n")); err != nil {
		t.Fatalf("a second match: %v", err)
	}
}

func TestRowWithoutOtherSide(t *testing.T) {
	c := comparison{Group: "e2e", Name: "own rate", Metric: byP99, Ours: sample{P99: time.Millisecond, Command: "bin/logagent bench e2e"}}
	if got := c.verdict(); got != "–" {
		t.Errorf("verdict %q, want –", got)
	}
	got := renderRegion(reportInput{Rows: []comparison{c}})
	if !strings.Contains(got, "| own rate | – | – | – | 1.00 ms | – |") {
		t.Errorf("row not rendered with empty other side:\n%s", got)
	}
}

func TestNATSServerConfig(t *testing.T) {
	tests := []struct {
		name       string
		routes     []string
		syncAlways bool
		want       []string
		wantNot    []string
	}{
		{"single server, default sync", nil, false,
			[]string{`server_name: "s1"`, `listen: "127.0.0.1:4222"`, `store_dir: "/tmp/s1"`},
			[]string{"sync_interval", "cluster"}},
		{"clustered, sync always", []string{"nats://127.0.0.1:6222", "nats://127.0.0.1:6223"}, true,
			[]string{"sync_interval: always", `listen: "127.0.0.1:6222"`, `routes: ["nats://127.0.0.1:6222", "nats://127.0.0.1:6223"]`},
			nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := natsServerConfig("s1", 4222, "/tmp/s1", 6222, tt.routes, tt.syncAlways)
			for _, w := range tt.want {
				if !strings.Contains(got, w) {
					t.Errorf("config lacks %q:\n%s", w, got)
				}
			}
			for _, w := range tt.wantNot {
				if strings.Contains(got, w) {
					t.Errorf("config has %q:\n%s", w, got)
				}
			}
		})
	}
}

func TestGroupRows(t *testing.T) {
	res := &results{logagent: map[string]sample{
		"groups-commit":        {RecordsPerSec: 12000},
		"groups-commit-all":    {RecordsPerSec: 120000},
		"groups-produce":       {RecordsPerSec: 8000},
		"groups-kill":          {P50: 10050 * time.Millisecond, P99: 10200 * time.Millisecond},
		"groups-kill_mid_poll": {P50: 13300 * time.Millisecond, P99: 13400 * time.Millisecond},
		"groups-leave":         {P50: 3 * time.Millisecond, P99: 5 * time.Millisecond},
		"groups-join":          {P50: 4 * time.Millisecond, P99: 6 * time.Millisecond},
	}}
	rows := groupRows(res)
	want := []struct{ ratio, verdict string }{
		{"1.50x", "missed"},   // 12000 commits/s: below 20000/s, above the baseline
		{"15.00x", "no goal"}, // offsets/s over produce records/s
		{"0.98x", "no goal"},  // session timeout ÷ max
		{"0.75x", "no goal"},
		{"–", "–"}, // leave and join: no counterpart
		{"–", "–"},
	}
	if len(rows) != len(want) {
		t.Fatalf("%d rows, want %d", len(rows), len(want))
	}
	for i, w := range want {
		if got := rows[i].ratioText(); got != w.ratio {
			t.Errorf("row %q: ratio %s, want %s", rows[i].Name, got, w.ratio)
		}
		if got := rows[i].verdict(); got != w.verdict {
			t.Errorf("row %q: verdict %s, want %s", rows[i].Name, got, w.verdict)
		}
	}
}
