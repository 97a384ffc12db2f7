package jepsen

import (
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/logagent/logagent/internal/testseed"
)

// Knobs of the long runs (make torture). A scenario's seed is replayed
// with internal/testseed's LOGAGENT_TEST_SEED.
const (
	cyclesEnv   = "LOGAGENT_JEPSEN_CYCLES"
	durationEnv = "LOGAGENT_JEPSEN_DURATION"
)

// config takes the scenario's seed (testseed, which logs it) and reads
// cycles and duration from the environment, with defaults that keep `make
// test` short. The duration is the whole test's, shared by its scenarios.
func config(t *testing.T, cycles, scenarios int) Config {
	t.Helper()
	cfg := Config{Seed: testseed.Seed(t), Cycles: cycles}
	if v := os.Getenv(cyclesEnv); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			t.Fatalf("%s=%q: want a positive integer", cyclesEnv, v)
		}
		cfg.Cycles = n
	}
	if v := os.Getenv(durationEnv); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			t.Fatalf("%s=%q: want a positive duration", durationEnv, v)
		}
		cfg.Duration = d / time.Duration(scenarios)
	}
	return cfg
}

// TestScenarios runs every fault scenario under load for a few cycles and
// checks the history: nothing acknowledged lost, no offset with two
// values, no duplicate of a write that was never in doubt, consumers
// reading forwards, replicas identical below their high watermarks, and
// every partition writable again after the heal.
func TestScenarios(t *testing.T) {
	scenarios := []struct {
		scenario Scenario
		cycles   int
	}{
		{Scenario{Name: "kill-leader", Fault: KillLeader{}}, 3},
		{Scenario{Name: "zombie-leader", Fault: PauseLeader{}}, 2},
		{Scenario{Name: "kill-all", Fault: KillAll{}}, 2},
		{Scenario{Name: "rolling-restart", Fault: RollingRestart{}}, 1},
		{Scenario{Name: "leader-cut-from-consul", Fault: CutLeaderFromConsul{}, Proxies: true}, 2},
		{Scenario{Name: "isolate-then-kill-leader", Fault: IsolateThenKillLeader{}, Proxies: true, MinInsync: 1}, 2},
		{Scenario{Name: "random-cuts", Fault: RandomCut{}, Proxies: true}, 4},
	}
	for _, tc := range scenarios {
		t.Run(tc.scenario.Name, func(t *testing.T) {
			Run(t, tc.scenario, config(t, tc.cycles, len(scenarios)))
		})
	}
}
