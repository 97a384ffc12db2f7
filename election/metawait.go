package election

import (
	"reflect"
	"sync"
)

// A campaign waits for a change of its own partition's metadata, not for
// any new snapshot: a snapshot usually changes a few keys, and waking all
// of an agent's thousands of campaigns at each one made thousands of
// goroutines runnable at once, which kept the lease's own requests from
// the CPU until the lease lapsed (docs/design.md §6, "Campaigns").

// metaWait is one campaign waiting for its partition's metadata to change.
type metaWait struct {
	topic string
	// seen is the partition as the campaign last decided on it.
	seen PartitionMeta
	// changed is closed when a newer snapshot may show the partition
	// otherwise.
	changed chan struct{}
}

// metaWaits are the campaigns waiting, woken by publish.
type metaWaits struct {
	mu    sync.Mutex
	waits map[*metaWait]struct{}
}

// waitPartitionChange registers a wait for a change of pm, as snap shows
// it. If snap is no longer current, the wait is over at once: the
// snapshots published since were not compared with it.
func (c *Client) waitPartitionChange(snap *Snapshot, pm PartitionMeta) *metaWait {
	w := &metaWait{topic: pm.Topic, seen: pm, changed: make(chan struct{})}
	c.metaWaits.mu.Lock()
	defer c.metaWaits.mu.Unlock()
	if c.snapshot.Load() != snap {
		close(w.changed)
		return w
	}
	if c.metaWaits.waits == nil {
		c.metaWaits.waits = map[*metaWait]struct{}{}
	}
	c.metaWaits.waits[w] = struct{}{}
	return w
}

// stopWaiting drops a wait that ended for another reason.
func (c *Client) stopWaiting(w *metaWait) {
	c.metaWaits.mu.Lock()
	delete(c.metaWaits.waits, w)
	c.metaWaits.mu.Unlock()
}

// wakeChanged ends the waits that snap, just made current in place of old,
// may answer otherwise: their partition's keys changed, or their topic's
// config or readability did, or Consul's index went back (equal indexes
// may then name other values). It runs after the swap, so a wait
// registered later on old finds old no longer current.
func (c *Client) wakeChanged(old, snap *Snapshot) {
	c.metaWaits.mu.Lock()
	defer c.metaWaits.mu.Unlock()
	if len(c.metaWaits.waits) == 0 {
		return
	}
	reset := snap.Index < old.Index
	topicChanged := map[string]bool{}
	for w := range c.metaWaits.waits {
		changed, known := topicChanged[w.topic]
		if !known {
			changed = reset || !sameTopic(old.topics[w.topic], snap.topics[w.topic])
			topicChanged[w.topic] = changed
		}
		if !changed {
			pm, ok := snap.Partition(w.topic, w.seen.Partition)
			changed = !ok || !samePartitionKeys(w.seen, pm)
		}
		if changed {
			close(w.changed)
			delete(c.metaWaits.waits, w)
		}
	}
}

// sameTopic reports whether a campaign would see the topic as before: both
// present, equally readable, with the same config.
func sameTopic(a, b *TopicMeta) bool {
	if a == nil || b == nil {
		return a == b
	}
	if (a.Err == nil) != (b.Err == nil) || (a.Err != nil && a.Err.Error() != b.Err.Error()) {
		return false
	}
	return reflect.DeepEqual(a.Config, b.Config)
}

// samePartitionKeys reports whether b was decoded from the same keys as a:
// Consul moves a key's ModifyIndex on every write, a lock's release
// included, so equal indexes (and leader session) mean equal values while
// the index does not go back.
func samePartitionKeys(a, b PartitionMeta) bool {
	return a.StateIndex == b.StateIndex && a.ReplicasIndex == b.ReplicasIndex &&
		a.ReassignIndex == b.ReassignIndex && (a.Reassign == nil) == (b.Reassign == nil) &&
		a.leaderIndex == b.leaderIndex && a.LeaderSession == b.LeaderSession
}
