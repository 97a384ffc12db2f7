package groupcoord

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/logagent/logagent/group"
)

// A group's stored state (the value of logagent/groups/<id> in Consul,
// docs/design.md §7.3) has two forms, both JSON objects. The plain form,
// every version's, names each partition of the target and of each
// member's grants with its topic:
//
//	{"epoch":7,"partitions":{"orders":12},
//	 "target":[{"topic":"orders","partition":0,"member":"m1"}, ...],
//	 "members":[{"id":"m1","topics":["orders"],"session_timeout_ms":10000,
//	             "epoch":7,"prev_epoch":6,
//	             "assigned":[{"topic":"orders","partition":0,"epoch":7}, ...],
//	             "revoking":[...]}],
//	 "coordinator_epoch":3}
//
// That takes 100-850 bytes a partition, so a group of a few thousand
// partitions passes what one Consul transaction holds (MaxStateBytes). A
// state the plain form cannot store is written in the compact form, which
// names each topic once per list and gives runs of consecutive partitions:
// [first, last] owned by one member in the target, [first, last, epoch]
// granted at one epoch:
//
//	{"format":2,"epoch":7,"partitions":{"orders":10000},
//	 "target":{"orders":{"m1":[[0,4999]],"m2":[[5000,9999]]}},
//	 "members":[{"id":"m1","topics":["orders"],"session_timeout_ms":10000,
//	             "epoch":7,"prev_epoch":6,
//	             "assigned":{"orders":[[0,4998,7]]},"revoking":{}}, ...],
//	 "coordinator_epoch":3}
//
// "target", "assigned" and "revoking" are objects where the plain form has
// arrays, and "target" is always written, so a version that reads only the
// plain form fails to decode a compact state (its coordinator answers 503
// for that group) rather than reading it as a group without members. The
// compact form is written only when the plain one does not fit, so every
// group such a version could store stays readable to it during a rolling
// upgrade.

// compactFormat is the "format" of the compact form; the plain form has
// none (0).
const compactFormat = 2

// maxStoredEntries bounds the partitions a compact state expands to, in
// its target and in its members' grants each: a run is two numbers
// whatever its length, and a corrupt one must not make a load allocate
// without bound. It is far above what fits MaxStateBytes in a group that
// was stored.
const maxStoredEntries = 1 << 20

// errStateFormat: a stored state that is not one of the two forms, or a
// compact one whose runs are not what encodeState writes.
var errStateFormat = errors.New("groupcoord: stored group state format")

type compactState struct {
	Format           int                              `json:"format"`
	Epoch            int32                            `json:"epoch"`
	Partitions       map[string]int32                 `json:"partitions,omitempty"`
	Target           map[string]map[string][][2]int32 `json:"target"`
	Members          []compactMember                  `json:"members,omitempty"`
	CoordinatorEpoch int32                            `json:"coordinator_epoch,omitempty"`
}

type compactMember struct {
	ID               string                `json:"id"`
	Topics           []string              `json:"topics"`
	SessionTimeoutMS int64                 `json:"session_timeout_ms"`
	Epoch            int32                 `json:"epoch"`
	PrevEpoch        int32                 `json:"prev_epoch"`
	Assigned         map[string][][3]int32 `json:"assigned"`
	Revoking         map[string][][3]int32 `json:"revoking"`
}

// encodeState returns the bytes stored for st: the plain form when it
// takes at most limit bytes (or limit is 0), the compact form otherwise.
// The choice depends on st alone, so equal states give equal bytes.
func encodeState(st storedState, limit int) ([]byte, error) {
	if limit > 0 && plainSizeAtLeast(st) > limit {
		// A group of thousands of partitions saves at every change: its
		// plain form, megabytes, is not built only to be thrown away.
		return json.Marshal(compact(st))
	}
	b, err := json.Marshal(st)
	if err != nil || limit <= 0 || len(b) <= limit {
		return b, err
	}
	return json.Marshal(compact(st))
}

// plainSizeAtLeast is a lower bound of the plain form's length: what its
// target entries and grants take with one digit per number and nothing
// escaped.
func plainSizeAtLeast(st storedState) int {
	const (
		targetEntry = len(`{"topic":"","partition":0,"member":""},`)
		grant       = len(`{"topic":"","partition":0,"epoch":0},`)
	)
	n := 0
	for _, te := range st.Target {
		n += targetEntry + len(te.Topic) + len(te.Member)
	}
	for _, m := range st.Members {
		for _, g := range m.Assigned {
			n += grant + len(g.Topic)
		}
		for _, g := range m.Revoking {
			n += grant + len(g.Topic)
		}
	}
	return n
}

// decodeState reads either form.
func decodeState(b []byte) (storedState, error) {
	var probe struct {
		Format int `json:"format"`
	}
	if err := json.Unmarshal(b, &probe); err != nil {
		return storedState{}, fmt.Errorf("%w: %v", errStateFormat, err)
	}
	switch probe.Format {
	case 0:
		var st storedState
		if err := json.Unmarshal(b, &st); err != nil {
			return storedState{}, fmt.Errorf("%w: %v", errStateFormat, err)
		}
		return st, nil
	case compactFormat:
		var cs compactState
		if err := json.Unmarshal(b, &cs); err != nil {
			return storedState{}, fmt.Errorf("%w: %v", errStateFormat, err)
		}
		return expand(cs)
	default:
		return storedState{}, fmt.Errorf("%w: format %d is not one this version reads (written by a later one?)", errStateFormat, probe.Format)
	}
}

func compact(st storedState) compactState {
	cs := compactState{
		Format:           compactFormat,
		Epoch:            st.Epoch,
		Partitions:       st.Partitions,
		Target:           map[string]map[string][][2]int32{},
		CoordinatorEpoch: st.CoordinatorEpoch,
	}
	// Target is in (topic, partition) order, so a member's next partition
	// of a topic either extends its last run or starts a new one.
	for _, te := range st.Target {
		byMember := cs.Target[te.Topic]
		if byMember == nil {
			byMember = map[string][][2]int32{}
			cs.Target[te.Topic] = byMember
		}
		runs := byMember[te.Member]
		if n := len(runs); n > 0 && runs[n-1][1] == te.Partition-1 {
			runs[n-1][1] = te.Partition
		} else {
			runs = append(runs, [2]int32{te.Partition, te.Partition})
		}
		byMember[te.Member] = runs
	}
	for _, ms := range st.Members {
		cs.Members = append(cs.Members, compactMember{
			ID:               ms.ID,
			Topics:           ms.Topics,
			SessionTimeoutMS: ms.SessionTimeoutMS,
			Epoch:            ms.Epoch,
			PrevEpoch:        ms.PrevEpoch,
			Assigned:         grantRuns(ms.Assigned),
			Revoking:         grantRuns(ms.Revoking),
		})
	}
	return cs
}

// grantRuns joins grants, in (topic, partition) order, into runs of
// consecutive partitions granted at one epoch.
func grantRuns(grants []group.GrantState) map[string][][3]int32 {
	out := map[string][][3]int32{}
	for _, g := range grants {
		runs := out[g.Topic]
		if n := len(runs); n > 0 && runs[n-1][1] == g.Partition-1 && runs[n-1][2] == g.Epoch {
			runs[n-1][1] = g.Partition
		} else {
			runs = append(runs, [3]int32{g.Partition, g.Partition, g.Epoch})
		}
		out[g.Topic] = runs
	}
	return out
}

// expand turns a compact state back into the lists group.State holds, in
// the order group.Group.State gives them. Runs must be what compact
// writes: in ascending order without overlaps, partitions from 0, and no
// more than maxStoredEntries partitions in the target nor in all grants.
func expand(cs compactState) (storedState, error) {
	st := storedState{State: group.State{Epoch: cs.Epoch, Partitions: cs.Partitions}, CoordinatorEpoch: cs.CoordinatorEpoch}
	targets := runBudget{left: maxStoredEntries}
	for _, topic := range slices.Sorted(maps.Keys(cs.Target)) {
		byMember := cs.Target[topic]
		var entries []group.TargetEntry
		for _, member := range slices.Sorted(maps.Keys(byMember)) {
			prev := int32(-1)
			for _, r := range byMember[member] {
				err := targets.expand(&prev, r[0], r[1], func(p int32) {
					entries = append(entries, group.TargetEntry{Topic: topic, Partition: p, Member: member})
				})
				if err != nil {
					return storedState{}, fmt.Errorf("target of topic %q, member %q: %w", topic, member, err)
				}
			}
		}
		slices.SortStableFunc(entries, func(a, b group.TargetEntry) int { return cmp.Compare(a.Partition, b.Partition) })
		st.Target = append(st.Target, entries...)
	}
	grants := runBudget{left: maxStoredEntries}
	for _, cm := range cs.Members {
		ms := group.MemberState{ID: cm.ID, Topics: cm.Topics, SessionTimeoutMS: cm.SessionTimeoutMS, Epoch: cm.Epoch, PrevEpoch: cm.PrevEpoch}
		var err error
		if ms.Assigned, err = expandGrants(cm.Assigned, &grants); err != nil {
			return storedState{}, fmt.Errorf("assigned of member %q: %w", cm.ID, err)
		}
		if ms.Revoking, err = expandGrants(cm.Revoking, &grants); err != nil {
			return storedState{}, fmt.Errorf("revoking of member %q: %w", cm.ID, err)
		}
		st.Members = append(st.Members, ms)
	}
	return st, nil
}

func expandGrants(byTopic map[string][][3]int32, budget *runBudget) ([]group.GrantState, error) {
	var out []group.GrantState
	for _, topic := range slices.Sorted(maps.Keys(byTopic)) {
		prev := int32(-1)
		for _, r := range byTopic[topic] {
			err := budget.expand(&prev, r[0], r[1], func(p int32) {
				out = append(out, group.GrantState{Topic: topic, Partition: p, Epoch: r[2]})
			})
			if err != nil {
				return nil, fmt.Errorf("topic %q: %w", topic, err)
			}
		}
	}
	return out, nil
}

// runBudget checks runs of partitions against the order compact writes
// them in and counts the partitions they expand to.
type runBudget struct{ left int }

// expand checks the run [first, last] that follows one ending at *prev
// (-1 for the first run of a list), counts its partitions, calls add with
// each, and moves *prev to last.
func (b *runBudget) expand(prev *int32, first, last int32, add func(partition int32)) error {
	if first <= *prev || last < first {
		return fmt.Errorf("%w: run [%d, %d] after one ending at %d", errStateFormat, first, last, *prev)
	}
	n := int(last) - int(first) + 1
	if n > b.left {
		return fmt.Errorf("%w: more than %d partitions", errStateFormat, maxStoredEntries)
	}
	b.left -= n
	// Up to last inclusive without p++ past it: last may be MaxInt32.
	for p := first; ; p++ {
		add(p)
		if p == last {
			break
		}
	}
	*prev = last
	return nil
}
