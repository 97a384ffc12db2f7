package main

import (
	"bytes"
	"image/png"
	"strings"
	"testing"
	"time"
)

func TestCostProcParsing(t *testing.T) {
	// A command name with spaces and a parenthesis, as /proc prints it.
	stat := "4242 (log agent) x) S 1 4242 4242 0 -1 4194560 9000 0 0 0 1234 567 0 0 20 0 12 0 100 1000000 2000 18446744073709551615"
	if got, err := cpuTicksOf(stat); err != nil || got != 1234+567 {
		t.Fatalf("cpuTicksOf = %d, %v; want 1801", got, err)
	}
	for _, bad := range []string{"", "4242 (x S 1", "4242 (x) S 1 2"} {
		if _, err := cpuTicksOf(bad); err == nil {
			t.Errorf("cpuTicksOf(%q) succeeded", bad)
		}
	}
	if got, err := rssOf("Name:\tlogagent\nVmRSS:\t   30601 kB\nThreads:\t12\n"); err != nil || got != 30601<<10 {
		t.Fatalf("rssOf = %d, %v", got, err)
	}
	if _, err := rssOf("Name:\tlogagent\n"); err == nil {
		t.Fatal("rssOf without VmRSS succeeded")
	}
	text := []byte("# HELP logagent_consul_requests_total x\n# TYPE logagent_consul_requests_total counter\n" +
		"logagent_consul_requests_total 1523\nlogagent_replica_fetch_requests_total_extra 9\nlogagent_replica_fetch_requests_total 7.5e+06\n")
	for _, tt := range []struct {
		name string
		want float64
		ok   bool
	}{
		{"logagent_consul_requests_total", 1523, true},
		{"logagent_replica_fetch_requests_total", 7.5e6, true},
		{"logagent_missing_total", 0, false},
	} {
		if got, ok := metricValue(text, tt.name); got != tt.want || ok != tt.ok {
			t.Errorf("metricValue(%s) = %v, %v; want %v, %v", tt.name, got, ok, tt.want, tt.ok)
		}
	}
	if got, err := parseCounts("100, 1000,3000"); err != nil || len(got) != 3 || got[1] != 1000 {
		t.Fatalf("parseCounts = %v, %v", got, err)
	}
	for _, bad := range []string{"", "0", "1,x", "-5"} {
		if _, err := parseCounts(bad); err == nil {
			t.Errorf("parseCounts(%q) succeeded", bad)
		}
	}
}

func TestCostGoals(t *testing.T) {
	agents := func(cpu float64, rss int64, fds int) []agentCost {
		return []agentCost{{Node: "n1", CPUPercent: cpu, RSSBytes: rss, FDs: fds}, {Node: "n2", CPUPercent: 1, RSSBytes: 1 << 20, FDs: 10}}
	}
	for _, tt := range []struct {
		name   string
		points []costPoint
		want   []string
	}{
		{"no point of 10,000", []costPoint{{Partitions: 100, Agents: agents(1, 1, 1)}}, []string{"not checked"}},
		{"every bound met", []costPoint{{Partitions: 10000, Led: 50 * time.Second, Agents: agents(4.9, 900<<20, 9999), FailoverMax: 9 * time.Second}},
			[]string{"60s: met", "5 % per agent: met", "1 GiB: met (at most 900 MiB)", "10000 per agent: met (at most 9999)", "429: met (0)", "10s: met (9s)"}},
		{"every bound missed", []costPoint{{Partitions: 10000, Led: 61 * time.Second, Agents: agents(5, 1<<30, 10000), FailoverMax: 11 * time.Second, Consul429: 3}},
			[]string{"60s: **missed**", "5 % per agent: **missed**", "1 GiB: **missed**", "10000 per agent: **missed**", "429: **missed** (3)", "10s: **missed**"}},
		{"a failed point misses", []costPoint{{Partitions: 10000, Err: "468 of 10000 partitions led after 10m0s"}}, []string{"**missed**, the point failed (468 of 10000"}},
		{"unrecovered partitions miss the failover bound", []costPoint{{Partitions: 10000, Led: time.Second, Agents: agents(1, 1, 1), FailoverMax: time.Second, Unrecovered: 2}},
			[]string{"10s: **missed** (1s, 2 never)"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got := costGoals(tt.points)
			for _, w := range tt.want {
				if !strings.Contains(got, w) {
					t.Errorf("costGoals = %q, want it to contain %q", got, w)
				}
			}
		})
	}
}

func TestCostRegionAndChart(t *testing.T) {
	points := []costPoint{
		{Partitions: 100, Led: 2 * time.Second, InSync: 5 * time.Second, ISRChanges: 7, Agents: agents3(8), FetchesPerSecond: 400, FailoverMax: 3 * time.Second, FailoverMedian: 3 * time.Second, KilledNode: "n1", FailedOver: 34},
		{Partitions: 300, Led: 4 * time.Second, ISRChanges: 900, Agents: agents3(9), FailoverMax: 3 * time.Second, FailoverMedian: 3 * time.Second, KilledNode: "n2", FailedOver: 100},
		{Partitions: 1000, Err: "create: refused"},
	}
	region := renderCost(costReport{Date: time.Unix(0, 0), Machine: "m", Command: "bin/benchrun cost -quick", Points: points,
		Produce: []produceCost{{Partitions: 1, RecordsPerSec: 25000, P99: 130 * time.Millisecond, Command: "c"}}})
	for _, w := range []string{"`bin/benchrun cost -quick`", "| 100 | 2s | 5s (7) | 8.0 / 8.0 / 8.0 |", "| 300 | 4s | not within the settle (900) | 9.0 / 9.0 / 9.0 |", "| 1000 | - | failed: create: refused |", "| 1 | 25000 |", "benchmarks-cost.png"} {
		if !strings.Contains(region, w) {
			t.Errorf("region lacks %q:\n%s", w, region)
		}
	}
	doc, err := replaceBetween("# B\n\n"+costBeginMarker+"\nold\n"+costEndMarker+"\nafter\n", costBeginMarker, costEndMarker, "new\n")
	if err != nil || doc != "# B\n\n"+costBeginMarker+"\nnew\n"+costEndMarker+"\nafter\n" {
		t.Fatalf("replaceBetween = %q, %v", doc, err)
	}
	var b bytes.Buffer
	if err := drawCostChart(&b, points); err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(&b)
	if err != nil {
		t.Fatal(err)
	}
	if got := img.Bounds().Dx(); got != costChartColumns*costPanelW {
		t.Fatalf("chart %d pixels wide, want %d", got, costChartColumns*costPanelW)
	}
}

func agents3(cpu float64) []agentCost {
	return []agentCost{{"n1", cpu, 1 << 20, 10, time.Second}, {"n2", cpu, 1 << 20, 10, time.Second}, {"n3", cpu, 1 << 20, 10, time.Second}}
}
