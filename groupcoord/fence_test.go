package groupcoord

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/logagent/logagent/group"
)

// TestStaleCoordinatorIsFenced: two agents believe they lead the group's
// offsets partition, the old one at epoch 1 (it has not noticed it lost
// the lead) and the new one at epoch 2, both reaching Consul. The old one
// expires member m, which heartbeats to the new one only, and grants m's
// partitions to n. Without a fence its write succeeded whenever its
// cached index was current (the new coordinator had loaded the group and
// written nothing since), and the new coordinator kept telling m it owned
// the partitions and appended m's commits while the stored state, what any
// successor restores, gave them to n. The old coordinator must change
// nothing, whichever of the two loaded the group first.
func TestStaleCoordinatorIsFenced(t *testing.T) {
	for _, tc := range []struct {
		name string
		// oldFirst: m joins through the old coordinator, then the new one
		// loads the group (a describe); else m joins through the new one
		// and the old one loads it afterwards (stale metadata routed a
		// describe there).
		oldFirst bool
	}{
		{"old coordinator loaded the group first", true},
		{"new coordinator loaded the group first", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			st, clock := newFakeStore(), &fakeClock{now: time.Unix(1_700_000_000, 0)}
			hOld, hNew := newFakeHost(), newFakeHost()
			hNew.epoch = 2
			hNew.hw[group.TopicPartition{Topic: "t", Partition: 0}] = 100
			cOld, cNew := newTestCoordinator(t, hOld, st, clock), newTestCoordinator(t, hNew, st, clock)

			first, second := cNew, cOld
			if tc.oldFirst {
				first, second = cOld, cNew
			}
			m, err := first.Join(ctx, "g", JoinRequest{Topics: []string{"t"}, MemberID: "m", SessionTimeoutMS: 3000})
			if err != nil || len(m.Assigned) != 4 {
				t.Fatalf("m's join: %+v, %v", m, err)
			}
			_, describeErr := second.Describe(ctx, "g", "x")
			if tc.oldFirst && describeErr != nil {
				t.Fatalf("the new coordinator's describe: %v", describeErr)
			}
			if !tc.oldFirst && !errors.Is(describeErr, ErrNotCoordinator) {
				t.Fatalf("the old coordinator's describe of a group the new one wrote: %v, want ErrNotCoordinator", describeErr)
			}

			clock.Add(2 * time.Second)
			if _, err := cNew.Heartbeat(ctx, "g", "m", HeartbeatRequest{MemberEpoch: m.MemberEpoch, Owned: m.Assigned}); err != nil {
				t.Fatalf("m's heartbeat to the new coordinator: %v", err)
			}
			clock.Add(time.Second)
			cOld.tick() // m expired, as the old coordinator sees it
			_, joinErr := cOld.Join(ctx, "g", JoinRequest{Topics: []string{"t"}, MemberID: "n"})
			if joinErr == nil {
				// The old coordinator's view, answered to n: m gone, n owns all.
				t.Errorf("n's join through the stale coordinator succeeded")
			}

			var stored group.State
			st.mu.Lock()
			err = json.Unmarshal(st.values["g"], &stored)
			st.mu.Unlock()
			if err != nil {
				t.Fatal(err)
			}
			if len(stored.Members) != 1 || stored.Members[0].ID != "m" {
				t.Errorf("stored members %+v, want m alone", stored.Members)
			}
			if _, err := cNew.Heartbeat(ctx, "g", "m", HeartbeatRequest{MemberEpoch: m.MemberEpoch, Owned: m.Assigned}); err != nil {
				t.Errorf("m's heartbeat to the new coordinator after the stale one's attempts: %v", err)
			}
			if _, err := cNew.Commit(ctx, "g", CommitRequest{MemberID: "m", MemberEpoch: m.MemberEpoch,
				Offsets: []OffsetCommit{{Topic: "t", Partition: 0, Offset: 7}}}); err != nil {
				t.Errorf("m's commit through the new coordinator: %v", err)
			}
		})
	}
}
