//go:build race

package kafka

// raceEnabled: the race detector's instrumentation about doubles the heap
// a request takes, which TestCraftedRequestHeap measures (a JoinGroup at
// its frame limit: 216 MiB without it, 417 MiB with it).
const raceEnabled = true
