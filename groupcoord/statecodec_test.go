package groupcoord

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/logagent/logagent/election"
	"github.com/logagent/logagent/group"
	"github.com/logagent/logagent/internal/testseed"
)

// randomStoredState is a state as group.Group.State gives it (lists in
// partition order, every partition owned at most once, grants no later
// than their member's epoch), with runs and gaps of every kind.
func randomStoredState(rng *rand.Rand) storedState {
	st := storedState{State: group.State{Epoch: 1 + rng.Int32N(50)}, CoordinatorEpoch: rng.Int32N(5)}
	members := make([]group.MemberState, 1+rng.IntN(5))
	for i := range members {
		epoch := 1 + rng.Int32N(st.Epoch)
		members[i] = group.MemberState{ID: fmt.Sprintf("member-%d", i), Topics: []string{"a"},
			SessionTimeoutMS: 10_000, Epoch: epoch, PrevEpoch: rng.Int32N(epoch + 1)}
	}
	topics := []string{"a", "b", "c"}[:1+rng.IntN(3)]
	for _, topic := range topics {
		n := 1 + rng.Int32N(300)
		if st.Partitions == nil {
			st.Partitions = map[string]int32{}
		}
		st.Partitions[topic] = n
		// Members take partitions in stretches, as an assignor's ranges
		// and a cooperative move's leftovers make them.
		owner := rng.IntN(len(members))
		for p := int32(0); p < n; p++ {
			if rng.IntN(8) == 0 {
				owner = rng.IntN(len(members))
			}
			if rng.IntN(10) != 0 {
				st.Target = append(st.Target, group.TargetEntry{Topic: topic, Partition: p, Member: members[owner].ID})
			}
			m := &members[rng.IntN(len(members))]
			grant := group.GrantState{Topic: topic, Partition: p, Epoch: 1 + rng.Int32N(m.Epoch)}
			switch rng.IntN(6) {
			case 0:
				m.Revoking = append(m.Revoking, grant)
			case 1:
			default:
				m.Assigned = append(m.Assigned, grant)
			}
		}
	}
	st.Members = members
	return st
}

func TestStateCodecRoundTrip(t *testing.T) {
	rng := testseed.Rand(t)
	for i := range 300 {
		st := randomStoredState(rng)
		plain, err := encodeState(st, 0)
		if err != nil {
			t.Fatal(err)
		}
		if want, _ := json.Marshal(st); !bytes.Equal(plain, want) {
			t.Fatalf("state %d: without a limit the stored bytes are not the plain form", i)
		}
		if bound := plainSizeAtLeast(st); bound > len(plain) {
			t.Fatalf("state %d: plainSizeAtLeast %d, above the plain form's %d bytes", i, bound, len(plain))
		}
		if fits, _ := encodeState(st, len(plain)); !bytes.Equal(fits, plain) {
			t.Fatalf("state %d: a plain form of exactly the limit was not kept", i)
		}
		small, err := encodeState(st, len(plain)-1)
		if err != nil {
			t.Fatal(err)
		}
		// Shorter too, but for a few partitions: its maps cost more than
		// the lists they replace.
		if !bytes.HasPrefix(small, []byte(`{"format":2,`)) {
			t.Fatalf("state %d: over the limit %.80q, want the compact form", i, small)
		}
		for _, b := range [][]byte{plain, small} {
			got, err := decodeState(b)
			if err != nil {
				t.Fatalf("state %d: decode %.80q: %v", i, b, err)
			}
			if !reflect.DeepEqual(got, st) {
				t.Fatalf("state %d: decoded\n%+v\nwant\n%+v", i, got, st)
			}
		}
		if again, _ := encodeState(mustDecode(t, small), len(plain)-1); !bytes.Equal(again, small) {
			t.Fatalf("state %d: the compact form read and written again changed", i)
		}
	}
}

func mustDecode(t *testing.T, b []byte) storedState {
	t.Helper()
	st, err := decodeState(b)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// TestCompactStateUnreadableAsPlain: an agent that reads only the plain
// form (the storedState it decodes with encoding/json) fails on a compact
// state, even one with no target and no grants, instead of reading it as
// a group without members.
func TestCompactStateUnreadableAsPlain(t *testing.T) {
	for _, st := range []storedState{
		{State: group.State{Epoch: 3}},
		{State: group.State{Epoch: 3, Members: []group.MemberState{{ID: "m", Topics: []string{"t"}, SessionTimeoutMS: 1000, Epoch: 3}}}},
		randomStoredState(rand.New(rand.NewPCG(1, 2))),
	} {
		b, err := json.Marshal(compact(st))
		if err != nil {
			t.Fatal(err)
		}
		var old storedState
		if err := json.Unmarshal(b, &old); err == nil {
			t.Fatalf("the plain form's decoder read %.120q without an error: %+v", b, old)
		}
	}
}

func TestDecodeStateRefusesBadRuns(t *testing.T) {
	member := `"members":[{"id":"m","topics":["t"],"session_timeout_ms":1000,"epoch":3,"prev_epoch":0,"assigned":%s,"revoking":{}}]`
	for _, tc := range []struct {
		name, value, want string
	}{
		{"later format", `{"format":3,"epoch":1}`, "format 3"},
		{"not JSON", `{"format":2,`, "stored group state format"},
		{"target run backwards", `{"format":2,"epoch":3,"target":{"t":{"m":[[5,4]]}}}`, "run [5, 4]"},
		{"target runs overlap", `{"format":2,"epoch":3,"target":{"t":{"m":[[0,4],[4,6]]}}}`, "run [4, 6] after one ending at 4"},
		{"target runs out of order", `{"format":2,"epoch":3,"target":{"t":{"m":[[5,6],[0,1]]}}}`, "run [0, 1] after one ending at 6"},
		{"negative partition", `{"format":2,"epoch":3,"target":{"t":{"m":[[-1,2]]}}}`, "run [-1, 2]"},
		{"target of every partition", `{"format":2,"epoch":3,"target":{"t":{"m":[[0,2147483647]]}}}`, "more than 1048576 partitions"},
		{"grants past the bound together", `{"format":2,"epoch":3,"target":{},` + fmt.Sprintf(member, `{"t":[[0,600000,1]],"u":[[0,600000,1]]}`) + `}`, "more than 1048576 partitions"},
		{"grant runs overlap", `{"format":2,"epoch":3,"target":{},` + fmt.Sprintf(member, `{"t":[[0,9,1],[9,12,2]]}`) + `}`, "run [9, 12] after one ending at 9"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := decodeState([]byte(tc.value))
			if !errors.Is(err, errStateFormat) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("decodeState(%s) = %v, want errStateFormat saying %q", tc.value, err, tc.want)
			}
		})
	}
}

// TestGroupOfTenThousandPartitionsIsStored: a group subscribed to a topic
// of 10,000 partitions (config's largest) with members whose ids are the
// longest allowed is stored (in the compact form: the plain one takes
// about 1.9 MB, five times what one Consul transaction holds) and taken
// over by the next coordinator with its assignment. Before, the join was
// refused 400 invalid_request as too large to store.
func TestGroupOfTenThousandPartitionsIsStored(t *testing.T) {
	ctx := context.Background()
	h, s, clock := newFakeHost(), newFakeStore(), &fakeClock{now: time.Unix(1_700_000_000, 0)}
	topic := strings.Repeat("t", group.MaxNameLen)
	h.topics[topic] = 10_000
	c := newTestCoordinatorWith(t, h, s, clock, func(cfg *Config) { cfg.MaxStateBytes = election.MaxGroupStateBytes })
	ids := []string{strings.Repeat("a", group.MaxNameLen), strings.Repeat("b", group.MaxNameLen), strings.Repeat("c", group.MaxNameLen)}
	epochs, owned := map[string]int32{}, map[string][]Partition{}
	for _, id := range ids {
		j, err := c.Join(ctx, "g", JoinRequest{Topics: []string{topic}, MemberID: id, SessionTimeoutMS: 60_000})
		if err != nil {
			t.Fatalf("join of %s…: %v", id[:1], err)
		}
		epochs[id], owned[id] = j.MemberEpoch, j.Assigned
	}
	// The members give up what they are asked to and take what they are
	// granted until the group settles.
	for range 4 {
		for _, id := range ids {
			r, err := c.Heartbeat(ctx, "g", id, HeartbeatRequest{MemberEpoch: epochs[id], Owned: owned[id]})
			if err != nil {
				t.Fatalf("heartbeat of %s…: %v", id[:1], err)
			}
			epochs[id], owned[id] = r.MemberEpoch, r.Assigned
		}
	}
	stored := s.values["g"]
	if !bytes.HasPrefix(stored, []byte(`{"format":2,`)) || len(stored) > election.MaxGroupStateBytes {
		t.Fatalf("stored %d bytes starting %.40q, want the compact form within %d", len(stored), stored, election.MaxGroupStateBytes)
	}
	before, err := c.Describe(ctx, "g", "")
	if err != nil {
		t.Fatal(err)
	}
	total := 0
	for _, m := range before.Members {
		total += len(m.Assigned) + len(m.Revoking)
	}
	if len(before.Members) != 3 || total != 10_000 {
		t.Fatalf("%d members owning %d partitions, want 3 owning all 10000", len(before.Members), total)
	}
	t.Logf("stored state: %d bytes (plain form %d)", len(stored), len(mustMarshal(t, mustDecode(t, stored))))

	h.epoch++
	c2 := newTestCoordinatorWith(t, h, s, clock, func(cfg *Config) { cfg.MaxStateBytes = election.MaxGroupStateBytes })
	after, err := c2.Describe(ctx, "g", "")
	if err != nil {
		t.Fatalf("the next coordinator's describe: %v", err)
	}
	if after.Epoch != before.Epoch || !reflect.DeepEqual(after.Members, before.Members) {
		t.Fatalf("the next coordinator has epoch %d, members %d; want epoch %d and the same members and assignment",
			after.Epoch, len(after.Members), before.Epoch)
	}
	list, err := List(ctx, s)
	if err != nil || len(list.Groups) != 1 || list.Groups[0].Members != 3 {
		t.Fatalf("List = %+v, %v; want g with 3 members", list, err)
	}
}

func mustMarshal(t testing.TB, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// FuzzDecodeState: any stored bytes decode to an error or to a state that
// the compact form writes and reads back unchanged.
func FuzzDecodeState(f *testing.F) {
	f.Add([]byte(`{"epoch":2,"target":[{"topic":"t","partition":0,"member":"m"}]}`))
	f.Add([]byte(`{"format":2,"epoch":3,"target":{"t":{"m":[[0,4],[6,9]]}},"members":[{"id":"m","topics":["t"],"session_timeout_ms":1000,"epoch":3,"prev_epoch":1,"assigned":{"t":[[0,3,2],[4,4,3]]},"revoking":{}}]}`))
	f.Add(mustMarshal(f, compact(randomStoredState(rand.New(rand.NewPCG(3, 4))))))
	f.Fuzz(func(t *testing.T, b []byte) {
		st, err := decodeState(b)
		if err != nil {
			return
		}
		again, err := json.Marshal(compact(st))
		if err != nil {
			t.Fatal(err)
		}
		back, err := decodeState(again)
		if err != nil {
			t.Fatalf("%q decoded, written compact as %q, which does not decode: %v", b, again, err)
		}
		// Compared in the plain form: empty and absent lists are the same.
		if got, want := mustMarshal(t, back), mustMarshal(t, st); !bytes.Equal(got, want) {
			t.Fatalf("%q decoded to %s, written compact and read back as %s", b, want, got)
		}
	})
}
