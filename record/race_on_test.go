//go:build race

package record

// raceEnabled: under the race detector sync.Pool drops items at random, so
// pooled paths allocate.
const raceEnabled = true
