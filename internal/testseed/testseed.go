// Package testseed gives randomized tests a seed that is printed with the
// test's output and can be replayed: LOGAGENT_TEST_SEED overrides it.
package testseed

import (
	"math/rand/v2"
	"os"
	"strconv"
	"testing"
	"time"
)

// Env names the variable that replays a seed.
const Env = "LOGAGENT_TEST_SEED"

// Seed returns the test's seed, from Env when set, else from the clock, and
// logs it so a failing run says how to repeat itself.
func Seed(t testing.TB) uint64 {
	t.Helper()
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv(Env); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("%s=%q: %v", Env, s, err)
		}
		seed = v
	}
	t.Logf("seed %d (repeat with %s=%d)", seed, Env, seed)
	return seed
}

// Rand returns a generator seeded with Seed.
func Rand(t testing.TB) *rand.Rand {
	t.Helper()
	seed := Seed(t)
	return rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
}
