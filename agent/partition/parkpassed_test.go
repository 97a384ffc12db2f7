package partition

import (
	"slices"
	"testing"
	"time"
)

// TestLateAnswerOfAParkPassedByAnAppend: n2's fetch is parked at the log
// end; a produce moves the log on, which wakes the session, but its writer
// reaches n2's answer only much later (other partitions' large answers
// before it on a slow link). n2 counts as caught up as of the append, not
// of the answer: it leaves the ISR lag_time_max after the append, its late
// unpark changes nothing, and the leader needs ticks meanwhile. Before, it
// stayed caught up, and acks=all writes waited on it, until the answer,
// and lag_time_max after that.
func TestLateAnswerOfAParkPassedByAnAppend(t *testing.T) {
	r, clock, leader, _ := parkedFollower(t) // lag_time_max 10 s

	clock.t = clock.t.Add(time.Minute)
	appended := clock.t
	appendOne(t, r)
	if !r.HoldsPark("n2", 1) {
		t.Fatal("the append ended the loop's park: the session would not unpark it")
	}
	if !leader.TickNeeded() {
		t.Error("no tick needed with n2 in the ISR, its park passed by an append")
	}
	// The session's writer answers n2's fetch 9 s after the append.
	r.Unpark("n2", 1, 1, appended.Add(9*time.Second))
	takeUnparks(t, r)
	for _, after := range []time.Duration{10 * time.Second, 10*time.Second + time.Millisecond} {
		leader.Tick(appended.Add(after))
		rd := leader.Ready()
		out := rd.ISRProposal != nil && slices.Equal(rd.ISRProposal.ISR, []string{"n1"})
		if want := after > 10*time.Second; out != want {
			t.Fatalf("%s after the append: proposal %+v, want n2 out: %t", after, rd.ISRProposal, want)
		}
	}
}
