package segstore

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/logagent/logagent/record"
)

// TestCrashRecovery runs seeded random workloads (leader and follower
// appends, syncs, checkpoints, rolls by size and age, truncations, full
// truncations, retention, clean restarts) over FaultFS, crashes at a random
// counted file operation, builds the post-crash disk, sometimes crashes
// again during recovery, and checks what Open recovers:
//   - exactly a prefix of what was appended (the log as the model has it,
//     or before or after the operation in flight at the crash), starting at
//     the right log start offset;
//   - holding every batch that a Sync reported durable;
//   - no corrupt batch; every index entry pointing at a batch header with
//     the right offset, each index exactly what the entry rule gives; the
//     epoch cache matching the batches' epochs;
//   - a log that keeps working: appends, a clean restart, the same content.
//
// SEGSTORE_CRASH_ITERS sets the number of iterations (default 1000);
// SEGSTORE_SEED replays: iteration i uses seed+i, and a failing subtest is
// named by its seed.
func TestCrashRecovery(t *testing.T) {
	crashSweep(t, 1000, false)
}

// TestCrashRecoveryAfterReopen is TestCrashRecovery's sweep with log
// failures: the workload also injects faults (failed fsyncs mostly, and
// failed writes, truncations, renames, creations, removals) that fail the
// log mid-stream, and takes Regions (a follower's fetch, limit = LEO). A
// failed log is recovered as the agent does it: closed, and opened again
// in process with Options.Reopen = the failed log, an Open that fails (a
// fault on its own truncate, create, rename or fsync) retried with the same
// Reopen. Besides TestCrashRecovery's checks, every reopened log must hold
// one of the states the failed operation may have left, cut to no less than
// what a Sync reported durable, with consistent indexes and epochs; and
// every Region, read at the end, must give the bytes it named or an error,
// never other batches. The workload goes on after each reopen (appends,
// truncations, rolls, retention, more failures) until the crash.
//
// SEGSTORE_CRASH_ITERS sets the number of iterations (default 60, kept
// small for the package's default run), SEGSTORE_SEED replays.
func TestCrashRecoveryAfterReopen(t *testing.T) {
	crashSweep(t, 60, true)
}

// crashSweep runs the crash iterations; reopens adds log failures and
// Regions to the workload (TestCrashRecoveryAfterReopen).
func crashSweep(t *testing.T, defaultIters int, reopens bool) {
	iters := envInt(t, "SEGSTORE_CRASH_ITERS", defaultIters)
	seed := testSeed(t)
	root := t.TempDir()
	stats := map[string]int{}
	start := time.Now()
	for i := range iters {
		s := seed + uint64(i)
		dir := filepath.Join(root, fmt.Sprint(i))
		ok := t.Run(fmt.Sprintf("seed=%d", s), func(t *testing.T) {
			crashIteration(t, s, dir, stats, reopens)
		})
		os.RemoveAll(dir)
		if !ok {
			t.Fatalf("iteration %d failed; replay with SEGSTORE_SEED=%d SEGSTORE_CRASH_ITERS=1", i, s)
		}
	}
	keys := make([]string, 0, len(stats))
	for k := range stats {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, " %s=%d", k, stats[k])
	}
	t.Logf("%d crash iterations in %v; crashed during:%s", iters, time.Since(start).Round(time.Millisecond), b.String())
}

// crashModel is the log as the workload believes it to be.
type crashModel struct {
	batches []modelBatch // from lso on, contiguous
	lso     int64
	synced  int64 // every batch below is durable
}

type modelBatch struct {
	base, next int64
	data       []byte
}

func (m crashModel) leo() int64 {
	if n := len(m.batches); n > 0 {
		return m.batches[n-1].next
	}
	return m.lso
}

func (m crashModel) clone() crashModel {
	m.batches = slices.Clone(m.batches)
	return m
}

// cut is Truncate(offset) for offset >= lso.
func (m crashModel) cut(offset int64) crashModel {
	m = m.clone()
	for i, b := range m.batches {
		if b.next > offset {
			m.batches = m.batches[:i]
			break
		}
	}
	m.synced = min(m.synced, m.leo())
	return m
}

// restart is TruncateFully(start).
func (m crashModel) restart(start int64) crashModel {
	return crashModel{lso: start, synced: start}
}

// dropBelow is retention moving the log start to start.
func (m crashModel) dropBelow(start int64) crashModel {
	m = m.clone()
	for len(m.batches) > 0 && m.batches[0].base < start {
		m.batches = m.batches[1:]
	}
	m.lso = start
	return m
}

type crashRun struct {
	t     *testing.T
	seed  uint64
	rng   *rand.Rand
	clock *fakeClock
	opts  Options
	fsys  *FaultFS
	dir   string
	l     *Log
	m     crashModel
	epoch int32
	stats map[string]int
	// reopens: the workload injects faults that fail the log, recovers it
	// in process (Options.Reopen), and takes Regions.
	reopens bool
	regions []crashRegion
}

// crashRegion is a Region the workload took and the bytes it named then.
type crashRegion struct {
	region *Region
	want   []byte
}

func crashIteration(t *testing.T, seed uint64, dir string, stats map[string]int, reopens bool) {
	rng := rand.New(rand.NewPCG(seed, 0x5e9))
	clock := newClock()
	opts := Options{
		SegmentBytes:       int64(200 + rng.IntN(2000)),
		IndexIntervalBytes: 16 + rng.IntN(400),
		IndexBytes:         indexEntrySize * (2 + rng.IntN(40)),
		MaxBatchBytes:      1 << 16,
		Files:              NewFileCache(crashFileCacheSize(seed)),
		Logger:             hclog.New(&hclog.LoggerOptions{Level: hclog.Info, Output: tWriter{t}}),
		Now:                clock.Now,
	}
	if rng.IntN(3) == 0 {
		opts.SegmentAge = time.Duration(1+rng.IntN(5)) * time.Minute
	}
	if rng.IntN(3) > 0 {
		opts.RetentionBytes = int64(200 + rng.IntN(2000))
		opts.Retention = time.Duration(2+rng.IntN(20)) * time.Minute
	}
	work := filepath.Join(dir, "run")
	if err := os.MkdirAll(work, 0o755); err != nil {
		t.Fatal(err)
	}
	fsys, err := NewFaultFS(work)
	if err != nil {
		t.Fatal(err)
	}
	r := &crashRun{t: t, seed: seed, rng: rng, clock: clock, opts: opts, fsys: fsys,
		dir: filepath.Join(work, "p0"), epoch: 1, stats: stats, reopens: reopens}
	if reopens {
		// Failures and reopens take operations of their own: crash later.
		fsys.CrashAfter(40 + rng.IntN(320))
	} else {
		fsys.CrashAfter(rng.IntN(160))
	}

	cands, during := r.workload()
	r.checkRegions(len(r.regions))
	if !fsys.Crashed() {
		fsys.Crash()
		during = "end"
	}
	stats[during]++
	t.Logf("crashed during %s after %d counted operations", during, fsys.Ops())
	if r.l != nil {
		r.l.Close() // releases descriptors; the crashed FS refuses the rest
	}

	post := filepath.Join(dir, "after1")
	if err := fsys.Reconstruct(post, rng); err != nil {
		t.Fatal(err)
	}
	if rng.IntN(4) == 0 {
		// Crash again, during recovery.
		fs2, err := NewFaultFS(post)
		if err != nil {
			t.Fatal(err)
		}
		fs2.CrashAfter(rng.IntN(12))
		l2, err := Open(fs2, filepath.Join(post, "p0"), opts)
		if err == nil {
			release := fs2.HoldCrash()
			r.verify(l2, cands)
			release()
			l2.Close()
		} else if !errors.Is(err, ErrCrashed) {
			t.Fatalf("open under a crashing FS: %v", err)
		}
		if !fs2.Crashed() {
			fs2.Crash()
		}
		post = filepath.Join(dir, "after2")
		if err := fs2.Reconstruct(post, rng); err != nil {
			t.Fatal(err)
		}
		stats["recovery crashed"]++
	}

	l, err := Open(OSFS{}, filepath.Join(post, "p0"), opts)
	if err != nil {
		t.Fatalf("recovery failed: %v", err)
	}
	got := r.verify(l, cands)

	// The recovered log keeps working across a clean restart.
	latest, _ := l.LatestEpoch()
	more := r.batchesAt(l.LogEndOffset(), latest.Epoch+1, 3)
	if err := l.AppendFollower(slices.Concat(more...), latest.Epoch+1); err != nil {
		t.Fatalf("append after recovery: %v", err)
	}
	if _, err := l.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l, err = Open(OSFS{}, filepath.Join(post, "p0"), opts)
	if err != nil {
		t.Fatalf("reopen after recovery: %v", err)
	}
	defer l.Close()
	if again := readAll(t, l, l.LogEndOffset()); !slices.EqualFunc(again, slices.Concat(got, more), bytes.Equal) {
		t.Fatalf("after append and restart: %d batches, want %d", len(again), len(got)+len(more))
	}
	checkIndexes(t, l)
	checkEpochs(t, l, slices.Concat(got, more))
}

// crashFileCacheSize is the open files an iteration's logs share: in one
// iteration of three a handful, so that the cache closes files all the
// time and fsyncs the ones with unsynced writes as it does (an fsync that
// may fail, or crash, in the middle of another operation). Drawn from a
// generator of its own: the workloads of replayed seeds stay as they were.
func crashFileCacheSize(seed uint64) int {
	rng := rand.New(rand.NewPCG(seed, 0xf11e5))
	if rng.IntN(3) == 0 {
		return 3 + rng.IntN(4)
	}
	return DefaultMaxOpenFiles
}

// batchesAt builds n contiguous batches from base.
func (r *crashRun) batchesAt(base int64, epoch int32, n int) [][]byte {
	out := make([][]byte, n)
	for i := range out {
		b := makeBatch(r.rng, batchSpec{base: base, epoch: epoch, records: 1 + r.rng.IntN(4), payload: r.rng.IntN(250),
			timestamp: r.clock.Now().UnixMilli()})
		out[i] = b
		base = record.Header(b).NextOffset()
	}
	return out
}

func (r *crashRun) record(data ...[]byte) {
	for _, b := range data {
		h := record.Header(b)
		r.m.batches = append(r.m.batches, modelBatch{base: h.BaseOffset(), next: h.NextOffset(), data: b})
	}
}

// workload runs random operations until the FS crashes. It returns the
// states the disk may hold and the operation in flight.
func (r *crashRun) workload() ([]crashModel, string) {
	t, rng := r.t, r.rng
	var err error
	if r.l, err = Open(r.fsys, r.dir, r.opts); err != nil {
		r.mustCrash("open", err)
		return []crashModel{r.m}, "open"
	}
	for step := 0; step < 120; step++ {
		prev := r.m.clone()
		var name string
		err = nil
		cands := func(ms ...crashModel) []crashModel { return ms }
		// failed: the states the disk may hold if the operation fails
		// (crashed, or failed the log); nil for the model as it is.
		var failed []crashModel
		ops := 100
		if r.reopens {
			ops = 112
		}
		switch p := rng.IntN(ops); {
		case p >= 106:
			name = "take region"
			err = r.takeRegion()
		case p >= 100:
			name = "inject fault"
			faults := []FaultOp{OpSync, OpSync, OpSync, OpSync, OpWrite, OpTruncate, OpRename, OpSyncDir, OpCreate, OpRemove}
			ft := Fault{Op: faults[rng.IntN(len(faults))], Nth: 1 + rng.IntN(8), Partial: rng.IntN(2) == 0}
			r.fsys.Inject(ft)
			t.Logf("injected a fault on the %s %d from now", ft.Op, ft.Nth)
		case p < 28:
			name = "append leader"
			if rng.IntN(20) == 0 {
				r.epoch++
			}
			b := r.batchesAt(0, 0, 1)[0]
			// Written in part or whole before a crash or a log failure, the
			// batch may survive a crash (the model's states are prefixes).
			if _, _, err = r.l.AppendLeader(b, r.epoch); err == nil || isCrash(err) || r.reopens {
				r.record(b)
			}
		case p < 42:
			name = "append follower"
			if rng.IntN(20) == 0 {
				r.epoch++
			}
			bs := r.batchesAt(r.m.leo(), r.epoch, 1+rng.IntN(3))
			if err = r.l.AppendFollower(slices.Concat(bs...), r.epoch); err == nil || isCrash(err) || r.reopens {
				r.record(bs...)
			}
		case p < 56:
			name = "sync"
			var synced int64
			if synced, err = r.l.Sync(); err == nil {
				if synced != r.m.leo() {
					t.Fatalf("sync returned %d, LEO %d", synced, r.m.leo())
				}
				r.m.synced = synced
			}
		case p < 63:
			name = "checkpoint"
			err = r.l.Checkpoint()
		case p < 68:
			name = "high watermark"
			err = r.l.SetHighWatermark(r.m.lso + rng.Int64N(r.m.leo()-r.m.lso+1))
		case p < 74:
			name = "truncate"
			offset := r.m.lso + rng.Int64N(r.m.leo()-r.m.lso+1)
			if err = r.l.Truncate(offset); err == nil {
				r.m = r.m.cut(offset)
			} else {
				failed = cands(prev, prev.cut(offset))
			}
		case p < 76:
			name = "truncate fully"
			start := max(0, r.m.leo()+rng.Int64N(100)-50)
			if err = r.l.TruncateFully(start); err == nil {
				r.m = r.m.restart(start)
			} else {
				failed = cands(prev, prev.cut(prev.lso), prev.restart(start))
			}
		case p < 84:
			name = "retention"
			bases := r.segmentBases()
			below := r.m.leo()
			if rng.IntN(3) == 0 {
				below = r.m.lso + rng.Int64N(r.m.leo()-r.m.lso+1)
			}
			var n int
			if n, err = r.l.ApplyRetention(below); err == nil {
				if n > 0 {
					r.stats["(retention deleted segments)"]++
				}
				r.m = r.m.dropBelow(r.l.LogStartOffset())
			} else {
				failed = cands(prev)
				for _, b := range bases {
					if b > prev.lso && b <= below {
						failed = append(failed, prev.dropBelow(b))
					}
				}
			}
		case p < 89:
			name = "clock"
			r.clock.Advance(time.Duration(rng.IntN(120)) * time.Second)
		case p < 91:
			name = "assign epoch"
			r.epoch++
			err = r.l.AssignEpoch(r.epoch, r.m.leo())
		case p < 94:
			name = "restart"
			// A restart is a new process: the Regions go with the old
			// one. Open without Reopen promises them nothing.
			r.checkRegions(len(r.regions))
			if err = r.l.Close(); err == nil {
				var l *Log
				l, err = Open(r.fsys, r.dir, r.opts)
				if err != nil && !isCrash(err) && r.reopens {
					// A fault injected earlier failed the Open: the
					// owner opens again.
					r.stats["(restart's open failed)"]++
					r.fsys.Clear()
					l, err = Open(r.fsys, r.dir, r.opts)
				}
				if err == nil {
					r.l = l
					r.verifyExact()
				} else if isCrash(err) {
					r.l = nil
				}
			}
		default:
			name = "read"
			off := r.m.lso + rng.Int64N(r.m.leo()-r.m.lso+1)
			err = r.checkRead(off)
		}
		t.Logf("%s: log [%d, %d) synced %d, err %v", name, r.m.lso, r.m.leo(), r.m.synced, err)
		// The file cache's fsync of a file it closes may fail the log in
		// the middle of an operation that then succeeds (a truncation
		// that deletes the segment whose index failed to sync): the next
		// operation finds the log failed, as the agent's does.
		logFailed := r.reopens && r.l != nil && r.l.failure.Load() != nil
		if err == nil && !logFailed {
			continue
		}
		if failed == nil {
			failed = cands(r.m)
		}
		if !isCrash(err) && logFailed {
			r.stats["(log failed)"]++
			if r.reopen(failed) {
				return failed, name + " (reopen)"
			}
			continue
		}
		r.mustCrash(name, err)
		return failed, name
	}
	return []crashModel{r.m}, "end"
}

// reopen recovers the failed log r.l as the agent does: closes it and opens
// it again in process with Options.Reopen = the failed log, retrying with
// the same Reopen an Open that a fault of its own (truncate, create,
// rename, fsync) fails. The reopened log must hold one of the states in
// failed, cut no lower than what a Sync reported durable; the model becomes
// that state. It reports whether the FS crashed meanwhile.
func (r *crashRun) reopen(failed []crashModel) (crashed bool) {
	t, rng := r.t, r.rng
	prev := r.l
	if err := prev.Close(); err != nil && !errors.Is(err, ErrClosed) {
		t.Fatalf("close of the failed log: %v", err)
	}
	r.l = nil
	r.fsys.Clear()
	opts := r.opts
	opts.Reopen = prev
	for attempt := 0; ; attempt++ {
		if attempt < 3 && rng.IntN(2) == 0 {
			faults := []FaultOp{OpTruncate, OpCreate, OpRename, OpSync, OpSyncDir, OpWrite}
			ft := Fault{Op: faults[rng.IntN(len(faults))], Nth: 1 + rng.IntN(3)}
			r.fsys.Inject(ft)
			t.Logf("reopen %d: injected a fault on the %s %d from now", attempt, ft.Op, ft.Nth)
		}
		l, err := Open(r.fsys, r.dir, opts)
		r.fsys.Clear()
		if err == nil {
			r.l = l
			break
		}
		if isCrash(err) {
			return true
		}
		if !errors.Is(err, ErrInjected) {
			t.Fatalf("reopen %d: unexpected error %v", attempt, err)
		}
		r.stats["(reopen failed, retried)"]++
	}
	r.stats["(reopened)"]++
	release := r.fsys.HoldCrash()
	got := r.verify(r.l, failed)
	release()
	lso, leo := r.l.LogStartOffset(), r.l.LogEndOffset()
	for _, c := range failed {
		if matchModel(got, lso, leo, c) == "" {
			r.m = c.cut(leo)
			r.m.synced = leo
			break
		}
	}
	t.Logf("reopened: log [%d, %d)", lso, leo)
	return false
}

// takeRegion reads a Region as a follower's fetch does (limit = LEO) and
// keeps it open, with the bytes it names now, for checkRegions. It keeps
// at most 6 open.
func (r *crashRun) takeRegion() error {
	if len(r.regions) >= 6 {
		r.checkRegions(1)
	}
	off := r.m.lso + r.rng.Int64N(r.m.leo()-r.m.lso+1)
	maxBytes := int64(1 + r.rng.IntN(3000))
	region, err := r.l.Read(off, maxBytes, r.m.leo())
	if err != nil {
		return err
	}
	want, err := r.l.ReadBytes(off, maxBytes, r.m.leo())
	if err != nil {
		region.Close()
		return err
	}
	if region.Len != int64(len(want)) {
		r.t.Fatalf("region at %d of %d bytes, ReadBytes gave %d", off, region.Len, len(want))
	}
	r.regions = append(r.regions, crashRegion{region: region, want: want})
	return nil
}

// checkRegions reads and closes the n oldest Regions taken: each gives the
// bytes it named when taken, or an error, never other bytes.
func (r *crashRun) checkRegions(n int) {
	r.t.Helper()
	for _, cr := range r.regions[:n] {
		got, err := io.ReadAll(cr.region)
		cr.region.Close()
		switch {
		case err != nil:
			r.stats["(region read failed)"]++
		case !bytes.Equal(got, cr.want):
			r.t.Fatalf("a region of %d bytes read %d bytes that are not the ones it named, without an error", len(cr.want), len(got))
		default:
			r.stats["(region read whole)"]++
		}
	}
	r.regions = slices.Delete(r.regions, 0, n)
}

func isCrash(err error) bool { return errors.Is(err, ErrCrashed) }

func (r *crashRun) mustCrash(op string, err error) {
	r.t.Helper()
	if !isCrash(err) {
		r.t.Fatalf("%s: unexpected error %v", op, err)
	}
}

func (r *crashRun) segmentBases() []int64 {
	r.l.mu.RLock()
	defer r.l.mu.RUnlock()
	var out []int64
	for _, s := range r.l.segments {
		out = append(out, s.base)
	}
	return out
}

// verifyExact checks a cleanly reopened log against the model.
func (r *crashRun) verifyExact() {
	r.t.Helper()
	if r.l.LogStartOffset() != r.m.lso || r.l.LogEndOffset() != r.m.leo() {
		r.t.Fatalf("after restart: [%d, %d), model [%d, %d)", r.l.LogStartOffset(), r.l.LogEndOffset(), r.m.lso, r.m.leo())
	}
	r.m.synced = r.m.leo()
}

func (r *crashRun) checkRead(off int64) error {
	got, err := r.l.ReadBytes(off, int64(1+r.rng.IntN(2000)), r.m.leo())
	if err != nil {
		return err
	}
	i := sort.Search(len(r.m.batches), func(i int) bool { return r.m.batches[i].next > off })
	if len(got) == 0 {
		if i != len(r.m.batches) {
			r.t.Fatalf("read %d: empty, model has a batch at %d", off, r.m.batches[i].base)
		}
		return nil
	}
	if i == len(r.m.batches) || !bytes.HasPrefix(got, r.m.batches[i].data) {
		r.t.Fatalf("read %d: does not start with the model's batch", off)
	}
	return nil
}

// verify checks a recovered log against the states the disk may hold and
// returns its batches.
func (r *crashRun) verify(l *Log, cands []crashModel) [][]byte {
	t := r.t
	t.Helper()
	got := readAll(t, l, l.LogEndOffset())
	lso, leo := l.LogStartOffset(), l.LogEndOffset()
	var reasons []string
	for ci, c := range cands {
		if reason := matchModel(got, lso, leo, c); reason != "" {
			reasons = append(reasons, fmt.Sprintf("state %d (start %d, end %d, synced %d): %s", ci, c.lso, c.leo(), c.synced, reason))
			continue
		}
		reasons = nil
		break
	}
	if reasons != nil {
		t.Fatalf("recovered [%d, %d) with %d batches matches no possible state:\n%s", lso, leo, len(got), strings.Join(reasons, "\n"))
	}
	if l.SyncedOffset() != leo {
		t.Fatalf("after open, synced %d, LEO %d", l.SyncedOffset(), leo)
	}
	if hw := l.HighWatermark(); hw < lso || hw > leo {
		t.Fatalf("HW %d outside [%d, %d]", hw, lso, leo)
	}
	checkIndexes(t, l)
	checkEpochs(t, l, got)
	return got
}

func matchModel(got [][]byte, lso, leo int64, c crashModel) string {
	if lso != c.lso {
		return fmt.Sprintf("log start %d", lso)
	}
	if leo < c.synced {
		return fmt.Sprintf("log end %d is below the synced offset", leo)
	}
	if len(got) > len(c.batches) {
		return fmt.Sprintf("%d batches, the state has %d", len(got), len(c.batches))
	}
	for i, b := range got {
		if !bytes.Equal(b, c.batches[i].data) {
			return fmt.Sprintf("batch %d (offset %d) differs", i, record.Header(b).BaseOffset())
		}
	}
	want := c.lso
	if len(got) > 0 {
		want = c.batches[len(got)-1].next
	}
	if leo != want {
		return fmt.Sprintf("log end %d, batches end at %d", leo, want)
	}
	return ""
}

// checkEpochs: the epoch cache is exactly the epoch changes of the batches.
func checkEpochs(t testing.TB, l *Log, batches [][]byte) {
	t.Helper()
	var want []EpochEntry
	for _, b := range batches {
		h := record.Header(b)
		if n := len(want); n == 0 || want[n-1].Epoch != h.LeaderEpoch() {
			want = append(want, EpochEntry{Epoch: h.LeaderEpoch(), StartOffset: h.BaseOffset()})
		}
	}
	if got := l.EpochEntries(); !slices.Equal(got, want) {
		t.Fatalf("epoch cache %v, batches say %v", got, want)
	}
}

// TestRetriedReopenMakesTheFailedOpensCutDurable: an Open with
// Options.Reopen cuts what no successful fsync of the failed log covered,
// and fails before that cut is durable (its own fsync fails); the agent
// opens again with the same Reopen, which finds nothing left to cut. A
// crash then must recover the log that Open returned ("syncs what it kept
// and writes R at the new log end, so a second crash recovers the same
// log"), never the batches it cut: the failed log's unsynced batches came
// back, valid and contiguous after R, under the offsets the reopened log
// had given other batches (TestCrashRecoveryAfterReopen, seed 1222).
func TestRetriedReopenMakesTheFailedOpensCutDurable(t *testing.T) {
	seed := testSeed(t)
	rng := rand.New(rand.NewPCG(seed, 59))
	clock := newClock()
	opts := smallOptions(t, clock)
	opts.SegmentBytes = 1 << 16
	fsys, dir, l := newFaultLog(t, opts)
	kept := appendN(t, l, rng, 6, 1, 200)
	if _, err := l.Sync(); err != nil {
		t.Fatal(err)
	}
	// The recovery point at the synced end: recovery validates (and
	// syncs) nothing below it.
	if err := l.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	appendN(t, l, rng, 6, 1, 200)
	failSync(t, fsys, l, rng, 0)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	reopen := opts
	reopen.Reopen = l
	fsys.Inject(Fault{Op: OpSync, Path: ".log"})
	if _, err := Open(fsys, dir, reopen); !errors.Is(err, ErrInjected) {
		t.Fatalf("open: %v, want the injected fsync failure after its cut", err)
	}
	fsys.Clear()
	l2 := openLog(t, fsys, dir, reopen)
	if got := readAll(t, l2, l2.LogEndOffset()); !slices.EqualFunc(got, kept, bytes.Equal) {
		t.Fatalf("reopened log holds %d batches, want %d", len(got), len(kept))
	}
	fsys.Crash()
	l2.Close()
	recoverReconstructions(t, fsys, rng, opts, func(i int, got [][]byte) {
		if !slices.EqualFunc(got, kept, bytes.Equal) {
			t.Fatalf("reconstruction %d: recovered %d batches, want the %d the reopened log held", i, len(got), len(kept))
		}
	})
}

// recoverReconstructions rebuilds the crashed fsys 40 times, recovers each
// with Open and hands check the batches it holds. Each reconstruction picks
// at random what survives of the unsynced writes: nothing, a prefix (torn
// or not), or everything.
func recoverReconstructions(t *testing.T, fsys *FaultFS, rng *rand.Rand, opts Options, check func(i int, got [][]byte)) {
	t.Helper()
	root := t.TempDir()
	for i := range 40 {
		post := filepath.Join(root, fmt.Sprint(i))
		if err := fsys.Reconstruct(post, rng); err != nil {
			t.Fatal(err)
		}
		l, err := Open(OSFS{}, filepath.Join(post, "p0"), opts)
		if err != nil {
			t.Fatalf("reconstruction %d: recovery failed: %v", i, err)
		}
		got := readAll(t, l, l.LogEndOffset())
		l.Close()
		check(i, got)
	}
}

// TestReopenDeletesSegmentsAfterADurableEnd: a truncation inside the first
// of two synced segments cuts the file and fails at its fsync, before it
// deletes the second. The Open that replaces the failed log finds the
// first segment ending at the cut, which no fsync covered, and deletes the
// second; a crash after that Open must recover the whole log or the cut
// one, never the first segment's old batches without the second's
// (TestCrashRecoveryAfterReopen, seed 1796532361767519267: recovery made
// the deletions durable and not the cut, and lost synced batches).
func TestReopenDeletesSegmentsAfterADurableEnd(t *testing.T) {
	seed := testSeed(t)
	rng := rand.New(rand.NewPCG(seed, 60))
	clock := newClock()
	opts := smallOptions(t, clock)
	// Room for every file: the cache's fsync of a file it evicts would
	// make the cut durable by chance.
	opts.Files = NewFileCache(DefaultMaxOpenFiles)
	fsys, dir, l := newFaultLog(t, opts)
	all := appendN(t, l, rng, 40, 1, 200)
	if _, err := l.Sync(); err != nil {
		t.Fatal(err)
	}
	// The recovery point at the log end: the truncation lowers it to the
	// cut, and the Open finds nothing to validate in the first segment.
	if err := l.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	if len(l.segments) < 2 {
		t.Fatalf("%d segments, want at least 2", len(l.segments))
	}
	keep := slices.IndexFunc(all, func(b []byte) bool { return record.Header(b).NextOffset() >= l.segments[1].base }) / 2
	cut := record.Header(all[keep]).BaseOffset()
	fsys.Inject(Fault{Op: OpSync, Path: ".log"})
	if err := l.Truncate(cut); !errors.Is(err, ErrFailed) {
		t.Fatalf("truncate: %v, want the injected fsync failure", err)
	}
	l2 := reopenFailedLog(t, fsys, dir, opts, l)
	if got := readAll(t, l2, l2.LogEndOffset()); !slices.EqualFunc(got, all[:keep], bytes.Equal) {
		t.Fatalf("reopened log holds %d batches, want the %d below the cut", len(got), keep)
	}
	fsys.Crash()
	l2.Close()
	recoverReconstructions(t, fsys, rng, opts, func(i int, got [][]byte) {
		if !slices.EqualFunc(got, all, bytes.Equal) && !slices.EqualFunc(got, all[:keep], bytes.Equal) {
			t.Fatalf("reconstruction %d: recovered %d batches, want the %d of the truncated log or all %d", i, len(got), keep, len(all))
		}
	})
}
