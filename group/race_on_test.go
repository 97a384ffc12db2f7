//go:build race

package group

// raceEnabled: the race detector makes the property test about ten times
// slower and finds nothing in a state machine without goroutines, so the
// test runs fewer rounds under it.
const raceEnabled = true
