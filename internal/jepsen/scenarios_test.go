package jepsen

import (
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/logagent/logagent/internal/testcluster"
	"github.com/logagent/logagent/internal/testseed"
)

// Knobs of the long runs (make torture, make dead-agent, make duplicates). A scenario's
// seed is replayed with internal/testseed's LOGAGENT_TEST_SEED.
const (
	cyclesEnv     = "LOGAGENT_JEPSEN_CYCLES"
	deadCyclesEnv = "LOGAGENT_JEPSEN_DEAD_CYCLES"
	dupCyclesEnv  = "LOGAGENT_JEPSEN_DUP_CYCLES"
	durationEnv   = "LOGAGENT_JEPSEN_DURATION"
	// timingEnv is "shipped" (the default: the agents' built-in timings,
	// what users get) or "fast" (testcluster's shortened ones).
	timingEnv = "LOGAGENT_JEPSEN_TIMING"
)

// config takes the scenario's seed (testseed, which logs it) and reads
// timing, cycles and duration from the environment, with defaults that
// keep `make test` short. The duration is the whole test's, shared by its
// scenarios. cyclesFrom names a variable that sets this scenario's cycles
// alone, before cyclesEnv's for every scenario.
func config(t *testing.T, cycles, scenarios int, cyclesFrom string) Config {
	t.Helper()
	cfg := Config{Seed: testseed.Seed(t), Cycles: cycles, Timing: testcluster.TimingShipped}
	if v := os.Getenv(timingEnv); v != "" {
		timing, err := testcluster.ParseTiming(v)
		if err != nil {
			t.Fatalf("%s: %v", timingEnv, err)
		}
		cfg.Timing = timing
	}
	for _, env := range []string{cyclesFrom, cyclesEnv} {
		v := os.Getenv(env)
		if env == "" || v == "" {
			continue
		}
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			t.Fatalf("%s=%q: want a positive integer", env, v)
		}
		cfg.Cycles = n
		break
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
// values, no duplicate of a write that was never in doubt (and, for
// producers resending until acknowledged, duplicates without idempotence
// and none with it), consumers reading forwards, replicas identical below
// their high watermarks, and every partition writable again after the
// heal.
func TestScenarios(t *testing.T) {
	scenarios := []struct {
		scenario   Scenario
		cycles     int
		cyclesFrom string
	}{
		{Scenario{Name: "kill-leader", Fault: KillLeader{}}, 3, ""},
		{Scenario{Name: "zombie-leader", Fault: PauseLeader{}}, 2, ""},
		{Scenario{Name: "kill-all", Fault: KillAll{}}, 2, ""},
		{Scenario{Name: "rolling-restart", Fault: RollingRestart{}}, 1, ""},
		{Scenario{Name: "leader-cut-from-consul", Fault: CutLeaderFromConsul{}, Proxies: true}, 2, ""},
		{Scenario{Name: "isolate-then-kill-leader", Fault: IsolateThenKillLeader{}, Proxies: true, MinInsync: 1}, 2, ""},
		{Scenario{Name: "random-cuts", Fault: RandomCut{}, Proxies: true}, 4, ""},
		{Scenario{Name: "wipe-replica", Fault: WipeReplica{}}, 2, ""},
		{Scenario{Name: "restart-consul", Fault: RestartConsul{}, PersistentConsul: true}, 2, ""},
		// Three partitions, each written all the time through every agent,
		// so that each one's wait after the kill is measured.
		{Scenario{Name: "dead-agent", Fault: DeadAgent{}, Partitions: 3, PinProducers: true}, 2, deadCyclesEnv},
		// Producers resending until acknowledged while answers are lost
		// after the append: duplicates the checker must see without
		// idempotence, and none with it.
		{Scenario{Name: "duplicates-plain", Fault: LoseAnswers{}, Proxies: true, Producing: RetryPlain}, 2, dupCyclesEnv},
		{Scenario{Name: "duplicates-idempotent", Fault: LoseAnswers{}, Proxies: true, Producing: RetryIdempotent}, 2, dupCyclesEnv},
	}
	for _, tc := range scenarios {
		t.Run(tc.scenario.Name, func(t *testing.T) {
			Run(t, tc.scenario, config(t, tc.cycles, len(scenarios), tc.cyclesFrom))
		})
	}
}
