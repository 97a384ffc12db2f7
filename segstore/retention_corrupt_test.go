package segstore

import (
	"errors"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/logagent/logagent/record"
)

// TestRetentionWithACorruptSealedSegment: a sealed segment below the
// recovery point whose batch header was damaged on disk (Open does not walk
// it) has an unknown newest timestamp. Time retention keeps it, and so the
// segments after it; size retention deletes it and the segments after it
// as usual; the damage is reported at every run that meets it. Retention
// returned at the failed header walk instead, before applying either
// limit, at every run: one damaged old segment stopped all retention of the
// partition.
func TestRetentionWithACorruptSealedSegment(t *testing.T) {
	testRetentionWithADamagedSealedSegment(t, segmentDamage{
		reopen: func(t *testing.T, dir, path string, opts Options) *Log {
			// One header byte of the damaged segment's first batch, its
			// magic: the walk for its newest timestamp stops there.
			f, err := os.OpenFile(path, os.O_RDWR, 0)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := f.WriteAt([]byte{record.Magic ^ 0xff}, hdrMagic); err != nil {
				t.Fatal(err)
			}
			if err := f.Close(); err != nil {
				t.Fatal(err)
			}
			return openLog(t, OSFS{}, dir, opts)
		},
		reported: func(err error, path string) bool {
			var ce *CorruptError
			return errors.Is(err, ErrCorrupt) && errors.As(err, &ce) && ce.Path == path && ce.Position == 0
		},
	})
}

// TestRetentionWhenASealedSegmentCannotBeOpened: a sealed segment whose
// newest timestamp is unknown (Open does not walk it) and whose file
// cannot be opened to learn it (out of descriptors: EMFILE) has an unknown
// age too, as a damaged one. Retention returned the open's error before
// applying either limit, at every run while it lasted: a host out of
// descriptors, which is also one filling up, let the partition's disk grow
// without bound. Deleting the segment goes by name, without its file open.
func TestRetentionWhenASealedSegmentCannotBeOpened(t *testing.T) {
	testRetentionWithADamagedSealedSegment(t, segmentDamage{
		reopen: func(t *testing.T, dir, path string, opts Options) *Log {
			ffs, err := NewFaultFS(dir)
			if err != nil {
				t.Fatal(err)
			}
			// One descriptor: the damaged segment's file, read by Open, is
			// closed again before retention needs it.
			opts.Files = NewFileCache(1)
			l := openLog(t, ffs, dir, opts)
			for _, s := range l.segments {
				opts.Files.mu.Lock()
				open := s.log.state != handleClosed
				opts.Files.mu.Unlock()
				if s.logPath == path && open {
					l.Close()
					t.Fatalf("%s still open after Open: retention would not open it", path)
				}
			}
			ffs.Inject(Fault{Op: OpOpen, Path: path, Err: syscall.EMFILE, Sticky: true})
			return l
		},
		reported: func(err error, path string) bool {
			return errors.Is(err, syscall.EMFILE) && strings.Contains(err.Error(), path)
		},
	})
}

// segmentDamage is what befalls one sealed segment of a closed log in
// testRetentionWithADamagedSealedSegment.
type segmentDamage struct {
	// reopen damages the segment whose .log is at path and opens the log
	// in dir again.
	reopen func(t *testing.T, dir, path string, opts Options) *Log
	// reported says whether a retention error reports the damage.
	reported func(err error, path string) bool
}

// testRetentionWithADamagedSealedSegment: a sealed segment whose newest
// timestamp cannot be learnt is kept by time retention, and so the
// segments after it; size retention deletes it and the segments after it
// as usual; the damage is reported at every run that meets it.
func testRetentionWithADamagedSealedSegment(t *testing.T, damage segmentDamage) {
	const (
		batchBytes   = record.HeaderSize + 300 // 361
		perSegment   = 11                      // 3971 bytes; a 12th does not fit in 4096
		sealed       = 6
		activeBytes  = 4 * batchBytes
		segmentBytes = perSegment * batchBytes
	)
	tests := []struct {
		name           string
		damaged        int           // the sealed segment damaged
		age            time.Duration // the clock's advance after the writes
		retention      time.Duration
		retentionBytes int64
		deleted        int  // segments deleted by the first run
		reported       bool // the first run's error reports the damage
	}{
		// The log holds 6*3971+1444 = 25270 bytes: 20000 lets size
		// retention delete one segment, 15000 two, 10000 three.
		{"size deletes the damaged oldest segment", 0, 0, time.Hour, 15000, 2, true},
		{"size deletes past the damaged segment", 1, 0, time.Hour, 10000, 3, true},
		{"size stops before the damaged segment", 3, 0, time.Hour, 15000, 2, true},
		{"size deletes the damaged segment, time the expired ones after it", 0, 2 * time.Hour, time.Hour, 20000, sealed, true},
		{"time deletes the expired segments before the damaged one", 2, 2 * time.Hour, time.Hour, 0, 2, true},
		{"time keeps a damaged oldest segment", 0, 2 * time.Hour, time.Hour, 0, 0, true},
		{"size alone needs no timestamp", 0, 0, 0, 15000, 2, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clock := newClock()
			opts := smallOptions(t, clock)
			opts.Retention = tt.retention
			opts.RetentionBytes = tt.retentionBytes
			dir := t.TempDir()
			l := openLog(t, OSFS{}, dir, opts)
			for range sealed*perSegment + 4 {
				b := makeBatch(nil, batchSpec{epoch: 1, payload: 300, timestamp: clock.Now().UnixMilli()})
				if _, _, err := l.AppendLeader(b, 1); err != nil {
					t.Fatal(err)
				}
			}
			if len(l.segments) != sealed+1 {
				t.Fatalf("%d segments, want %d sealed and the active one", len(l.segments), sealed)
			}
			for i, s := range l.segments {
				want := int64(segmentBytes)
				if i == sealed {
					want = activeBytes
				}
				if got := s.size.Load(); got != want || s.base != int64(i*perSegment) {
					t.Fatalf("segment %d: base %d, %d bytes; want base %d, %d bytes", i, s.base, got, i*perSegment, want)
				}
			}
			bad := l.segments[tt.damaged]
			badBase, badPath, badIndex := bad.base, bad.logPath, bad.indexPath
			// Close writes the recovery point at the log end: the next
			// Open trusts the sealed segments and learns no timestamp.
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}

			l = damage.reopen(t, dir, badPath, opts)
			defer l.Close()
			clock.Advance(tt.age)
			hw := l.LogEndOffset()
			n, err := l.ApplyRetention(hw)
			if n != tt.deleted {
				t.Fatalf("retention deleted %d segments (%v), want %d", n, err, tt.deleted)
			}
			if tt.reported != damage.reported(err, badPath) || (!tt.reported && err != nil) || errors.Is(err, ErrFailed) {
				t.Fatalf("retention error %v, want one reporting the damage of %s: %v", err, badPath, tt.reported)
			}
			if want := int64(tt.deleted * perSegment); l.LogStartOffset() != want || l.segments[0].base != want {
				t.Fatalf("log start %d, first segment %d, want %d", l.LogStartOffset(), l.segments[0].base, want)
			}
			if len(l.segments) != sealed+1-tt.deleted {
				t.Fatalf("%d segments left, want %d", len(l.segments), sealed+1-tt.deleted)
			}
			kept := tt.deleted <= tt.damaged
			if kept && l.segments[tt.damaged-tt.deleted].base != badBase {
				t.Fatalf("damaged segment %d not kept", badBase)
			}
			for _, path := range []string{badPath, badIndex} {
				if _, err := os.Stat(path); kept != (err == nil) {
					t.Fatalf("damaged segment's file %s: kept %v, stat %v", path, kept, err)
				}
			}

			// A second run deletes nothing more and reports the damage again
			// while the segment is kept and time retention walks it.
			n, err = l.ApplyRetention(hw)
			again := kept && tt.retention > 0
			if n != 0 || again != damage.reported(err, badPath) || (!again && err != nil) {
				t.Fatalf("second run: %d deleted, %v; want 0 and the damage reported: %v", n, err, again)
			}
		})
	}
}

// statFailFS fails ModTime of the file at path.
type statFailFS struct {
	FS
	path string
}

func (f statFailFS) OpenFile(name string, flag int, perm os.FileMode) (File, error) {
	file, err := f.FS.OpenFile(name, flag, perm)
	if err != nil || name != f.path {
		return file, err
	}
	return statFailFile{file}, nil
}

type statFailFile struct{ File }

func (statFailFile) ModTime() (time.Time, error) { return time.Time{}, errStat }

var errStat = errors.New("injected stat failure")

// TestRetentionWhenAStatFails: a segment without timestamps whose file's
// mtime cannot be read has an unknown age too: time retention keeps it,
// size retention deletes it and goes on, and the error is reported. The
// stat error stopped size retention at that segment.
func TestRetentionWhenAStatFails(t *testing.T) {
	tests := []struct {
		name           string
		retentionBytes int64
		deleted        int
	}{
		// Three sealed segments of 3971 bytes and an active one of 1444:
		// 5000 bytes let size retention delete the first two.
		{"size deletes the segment of unknown age and the next", 5000, 2},
		{"time keeps the segment of unknown age", 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clock := newClock()
			opts := smallOptions(t, clock)
			opts.Retention = time.Hour
			opts.RetentionBytes = tt.retentionBytes
			dir := t.TempDir()
			fsys := statFailFS{FS: OSFS{}, path: dir + "/00000000000000000000.log"}
			l := openLog(t, fsys, dir, opts)
			defer l.Close()
			for range 3*11 + 4 {
				if _, _, err := l.AppendLeader(makeBatch(nil, batchSpec{epoch: 1, payload: 300, timestamp: -1}), 1); err != nil {
					t.Fatal(err)
				}
			}
			if len(l.segments) != 4 || l.segments[0].logPath != fsys.path {
				t.Fatalf("%d segments, the first %s", len(l.segments), l.segments[0].logPath)
			}
			clock.Advance(2 * time.Hour)
			// The other sealed segments were written within the retention.
			for _, s := range l.segments[1:3] {
				if err := os.Chtimes(s.logPath, clock.Now(), clock.Now()); err != nil {
					t.Fatal(err)
				}
			}
			n, err := l.ApplyRetention(l.LogEndOffset())
			if n != tt.deleted || !errors.Is(err, errStat) || errors.Is(err, ErrFailed) {
				t.Fatalf("retention deleted %d segments (%v), want %d and the stat error", n, err, tt.deleted)
			}
			if want := int64(tt.deleted * 11); l.LogStartOffset() != want {
				t.Fatalf("log start %d, want %d", l.LogStartOffset(), want)
			}
		})
	}
}
