package reassign

import (
	"slices"
	"time"
)

// MaxHealing bounds the moves self-healing keeps in flight in the
// cluster (as the metadata shows them): each copies a whole partition to
// a new agent, and a dead agent's partitions are re-placed a few at a time
// rather than all at once, so that producers keep their bandwidth.
const MaxHealing = 2

// DeadSince tracks since when a leader has seen each replica of its
// partition dead. It holds only what this leader saw: a new leadership (or
// a restarted agent) starts counting afresh, which can only make a
// replacement later than replace_dead_after, never earlier.
type DeadSince map[string]time.Time

// Observe records the replicas dead at now: newly dead ones start
// counting, ones alive again are forgotten.
func (d DeadSince) Observe(dead []string, now time.Time) {
	for id := range d {
		if !slices.Contains(dead, id) {
			delete(d, id)
		}
	}
	for _, id := range dead {
		if _, ok := d[id]; !ok {
			d[id] = now
		}
	}
}

// Due lists, in replicas' order, the replicas dead for at least after at
// now; none when after is 0 (self-healing off).
func (d DeadSince) Due(replicas []string, after time.Duration, now time.Time) []string {
	if after <= 0 {
		return nil
	}
	var due []string
	for _, id := range replicas {
		if since, ok := d[id]; ok && now.Sub(since) >= after {
			due = append(due, id)
		}
	}
	return due
}

// Replace is the target that puts each of dead (members of replicas) on
// a live agent that holds no replica of the partition, in the dead
// replica's place (so the preferred leader stays where it was unless it is
// the one replaced): the agent with the fewest replicas in load first,
// then by node id, each pick counted before the next. ok is false when
// some dead replica has no such agent: a move that kept it would not
// re-place it, and one that dropped it would lower the replication factor,
// so the partition waits for an agent to come (or come back).
func Replace(replicas, dead, alive []string, load map[string]int) ([]string, bool) {
	if len(dead) == 0 {
		return nil, false
	}
	counts := make(map[string]int, len(load))
	for k, v := range load {
		counts[k] = v
	}
	target := slices.Clone(replicas)
	for i, id := range target {
		if !slices.Contains(dead, id) {
			continue
		}
		best := ""
		for _, cand := range alive {
			if slices.Contains(replicas, cand) || slices.Contains(target, cand) {
				continue
			}
			if best == "" || counts[cand] < counts[best] || (counts[cand] == counts[best] && cand < best) {
				best = cand
			}
		}
		if best == "" {
			return nil, false
		}
		target[i] = best
		counts[best]++
	}
	return target, true
}

// Added is a replica a move adds, as the partition's leader sees it: its
// log end (its last fetch offset, -1 before its first fetch of this
// leadership or when the leader does not follow it yet), and whether it
// is in the ISR.
type Added struct {
	ID     string
	LogEnd int64
	InSync bool
}

// StalledSince tracks, for one move, since when each replica it adds has
// kept the same log end outside the ISR: a replica that is dead, or whose
// agent never opened it, never fetches, and the move waits for it for
// ever (holding one of the MaxHealing slots while its agent is alive).
// Like DeadSince it holds only what this leader saw, so a new leadership
// counts afresh (later, never earlier).
type StalledSince map[string]Stall

// Stall is an added replica's log end and since when it has not moved.
type Stall struct {
	LogEnd int64
	Since  time.Time
}

// Observe records the added replicas at now: a log end that moved starts
// the count again, a replica in the ISR (caught up) or no longer added is
// forgotten.
func (s StalledSince) Observe(added []Added, now time.Time) {
	for id := range s {
		if !slices.ContainsFunc(added, func(a Added) bool { return a.ID == id && !a.InSync }) {
			delete(s, id)
		}
	}
	for _, a := range added {
		if st, ok := s[a.ID]; !a.InSync && (!ok || st.LogEnd != a.LogEnd) {
			s[a.ID] = Stall{LogEnd: a.LogEnd, Since: now}
		}
	}
}

// Stalled lists, sorted, the added replicas whose log end has not moved
// for at least after at now; none when after is 0 (self-healing off).
func (s StalledSince) Stalled(after time.Duration, now time.Time) []string {
	if after <= 0 {
		return nil
	}
	var out []string
	for id, st := range s {
		if now.Sub(st.Since) >= after {
			out = append(out, id)
		}
	}
	slices.Sort(out)
	return out
}
