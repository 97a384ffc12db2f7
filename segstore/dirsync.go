package segstore

import "sync"

// dirSyncs coalesces OSFS.SyncDir calls per directory, as a group commit:
// callers that ask while an fsync(2) of the directory runs share the next
// one, which starts after the running one ends, so every caller is covered
// by an fsync that began after it asked. Opening thousands of new
// partitions at once fsyncs their common data directory once per open;
// coalesced, the opens running side by side share most of those
// (docs/benchmarks.md, "Creating 10,000 partitions").
var dirSyncs sync.Map // directory path → *dirSyncer

// dirSyncer orders the fsyncs of one directory.
type dirSyncer struct {
	mu      sync.Mutex
	running *dirSync // the fsync in progress, nil if none
	next    *dirSync // the fsync callers arriving now share, not started
}

// dirSync is one fsync of a directory and its outcome. It has started once
// it is no longer its syncer's next.
type dirSync struct {
	done chan struct{}
	err  error // set before done is closed
}

// syncDirCoalesced returns the outcome of an fsync of dir, by syncOnce,
// that started after the call began, shared with the calls waiting with it.
// A failed fsync fails every call it covered and is not retried: the next
// call starts a new one.
func syncDirCoalesced(dir string, syncOnce func(string) error) error {
	v, _ := dirSyncs.LoadOrStore(dir, &dirSyncer{})
	s := v.(*dirSyncer)
	s.mu.Lock()
	if s.next == nil {
		s.next = &dirSync{done: make(chan struct{})}
	}
	mine := s.next
	for {
		if s.next != mine {
			s.mu.Unlock()
			<-mine.done
			return mine.err
		}
		if s.running == nil {
			s.next, s.running = nil, mine
			s.mu.Unlock()
			mine.err = syncOnce(dir)
			s.mu.Lock()
			s.running = nil
			if s.next == nil {
				// Idle: forgotten, so that the map does not hold every
				// directory ever synced. A caller still holding s only
				// runs an fsync of its own beside a new syncer's.
				dirSyncs.CompareAndDelete(dir, s)
			}
			s.mu.Unlock()
			close(mine.done)
			return mine.err
		}
		running := s.running
		s.mu.Unlock()
		<-running.done
		s.mu.Lock()
	}
}
