package testcluster

import (
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/logagent/logagent/config"
)

func TestParseTiming(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    Timing
		wantErr bool
	}{
		{"fast", TimingFast, false},
		{"shipped", TimingShipped, false},
		{"", "", true},
		{"Shipped", "", true},
		{"slow", "", true},
	} {
		got, err := ParseTiming(tc.in)
		if got != tc.want || (err != nil) != tc.wantErr || (err != nil && !errors.Is(err, ErrUnknownTiming)) {
			t.Errorf("ParseTiming(%q) = %q, %v; want %q, error %v", tc.in, got, err, tc.want, tc.wantErr)
		}
	}
}

// TestResolveTimings checks that the figures a test labels with
// Cluster.Timings are what the agents' configuration files resolve to:
// fastHCL's values, the built-in defaults when the files set no timing,
// and a test's own HCL over either.
func TestResolveTimings(t *testing.T) {
	defaults, err := config.Load()
	if err != nil {
		t.Fatal(err)
	}
	shipped := Timings{Timing: TimingShipped, SessionTTL: defaults.Consul.SessionTTL, CheckTTL: defaults.Consul.CheckTTL,
		LockDelay: defaults.Consul.LockDelay, LagTimeMax: defaults.Replication.LagTimeMax, FetchMaxWait: defaults.Replication.FetchMaxWait}
	fast := Timings{Timing: TimingFast, SessionTTL: 5 * time.Second, CheckTTL: 2 * time.Second, LockDelay: 100 * time.Millisecond,
		LagTimeMax: 2 * time.Second, FetchMaxWait: 250 * time.Millisecond}
	overridden := fast
	overridden.LagTimeMax = 30 * time.Second
	for _, tc := range []struct {
		name   string
		timing Timing
		files  []string
		want   Timings
	}{
		{"fast", TimingFast, []string{baseHCL + fastHCL}, fast},
		{"shipped", TimingShipped, []string{baseHCL}, shipped},
		{"a test's HCL wins", TimingFast, []string{baseHCL + fastHCL, `replication { lag_time_max = "30s" }`}, overridden},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			var paths []string
			for i, body := range tc.files {
				paths = append(paths, writeFile(t, filepath.Join(dir, string(rune('a'+i))+".hcl"), body))
			}
			if got := resolveTimings(t, tc.timing, paths); got != tc.want {
				t.Fatalf("resolveTimings = %+v, want %+v", got, tc.want)
			}
		})
	}
}
