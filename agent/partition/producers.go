package partition

import (
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"time"

	"github.com/logagent/logagent/producer"
	"github.com/logagent/logagent/record"
	"github.com/logagent/logagent/segstore"
)

// The idempotent-producer state of a partition (docs/design.md §7) lives in
// its log: every batch of an idempotent producer carries its id, epoch and
// sequences, and every replica feeds the batches it appends, as leader or
// as follower, to its producer.State, so a new leader knows what the old
// one accepted. The loop owns the state. A snapshot beside the segments
// bounds the scan at open:
//
//	<partition dir>/producers.snapshot   producer.State as of end offset E
//
// written (atomically: temporary file, fsync, rename, directory fsync) on
// the retention tick (every minute) when the state changed or the log start
// passed E, and at a clean close: a busy partition pays one small fsync a
// minute, and the scan at open covers at most a minute of appends after a
// crash. At open the snapshot is used when E is within the log (from its
// start to its end), and the batches from E to the log end are applied to
// it; one beyond the log end (the log lost an unsynced tail), below the log
// start (retention deleted batches it does not have) or unreadable is
// ignored and the whole log is scanned. One whose state refuses a batch
// of the log after E (it holds batches the log does not have: written
// before a truncation it did not see) is removed and the whole log
// scanned, at open and at every rebuild (a reopen, a refused append). The
// snapshot keeps the producers whose batches retention deleted, which the
// log no longer shows.
// A truncation below E removes the snapshot, durably, before anything is
// appended again, since a log cut and refilled past E would make it
// describe batches the log no longer has (a crash in between leaves a log
// end below E, so the snapshot is ignored).
const producerSnapshotFile = "producers.snapshot"

// unknownSnapshotEnd is producerSnapshotEnd for a snapshot on disk whose
// end the replica could not read: above every log end.
const unknownSnapshotEnd = math.MaxInt64

// producerScanBytes is how much of the log one read of the open-time scan
// takes.
const producerScanBytes = 1 << 20

// ProducerError is the leader's refusal of an idempotent batch.
type ProducerError struct {
	Decision producer.Decision
}

func (e *ProducerError) Error() string {
	if e.Decision.Reason != "" {
		return "agent: " + e.Decision.Reason
	}
	return "agent: idempotent batch refused: " + e.Decision.Verdict.String()
}

// loadProducers builds the producer state of the current log: from the
// snapshot when it is usable, then the batches after it (a snapshot whose
// state refuses one of them is removed, and the whole log scanned). At
// open, at a reopen and at every rebuild. An error says the
// state does not reach the log end: a read the log refused, or a batch the
// state refused.
func (r *Replica) loadProducers() error {
	log := r.CurrentLog()
	opts := r.deps.ProducerOptions
	state, from := r.readProducerSnapshot(log, opts)
	if state != nil && from < log.LogStartOffset() {
		// Retention deleted batches after the snapshot's end (the agent
		// stopped between the retention run and the snapshot it makes
		// due): the producers of those batches would be known at the
		// sequences they had before them, and their next batch refused
		// as out of order. Kafka, which keeps no snapshot below the log
		// start, forgets them too: the log from its start is all there is.
		r.log.Info("producer snapshot ends below the log start; scanning the log",
			"snapshot_end", from, "log_start_offset", log.LogStartOffset())
		state = nil
	}
	fromSnapshot := state != nil
	if state == nil {
		state, from = producer.New(opts), log.LogStartOffset()
	}
	// The producers of the batches after the snapshot are seen now: one
	// of them may resend a batch whose outcome it did not learn. Those of
	// the snapshot alone keep the expiry their timestamps give (seeing
	// them all at every open would keep dead producers for as long as the
	// agent restarts within the expiration).
	scanned, err := scanProducers(log, state, from, r.deps.Now())
	// kept: a snapshot that disagrees with the log and could not be
	// removed, which the next snapshot must replace.
	kept := false
	if fromSnapshot && errors.Is(err, errProducerStateRefused) {
		// The snapshot holds batches the log does not have (written
		// before a truncation it did not see): kept, every rebuild, open
		// and reopen loaded it again and refused the same batch, and the
		// partition failed its log again and again. The log is the
		// truth, and without a snapshot the next open scans it whole.
		r.log.Warn("producer snapshot disagrees with the log; removing it and scanning the whole log",
			"snapshot", filepath.Join(r.dir, producerSnapshotFile), "snapshot_end", from, "error", err)
		kept = !r.discardProducerSnapshot()
		state, from = producer.New(opts), log.LogStartOffset()
		scanned, err = scanProducers(log, state, from, r.deps.Now())
	}
	if err != nil {
		// The log refused a read: it is failing. The state holds what was
		// read; failLog rebuilds it from the reopened log.
		r.log.Error("cannot read the log for its producer state", "from", from, "error", err)
	}
	state.RemoveBefore(log.LogStartOffset())
	r.expireProducers(state)
	r.producers, r.producersDirty = state, kept
	if state.Len() > 0 || scanned > 0 {
		r.log.Debug("producer state loaded", "producers", state.Len(), "snapshot_end", from, "batches_scanned", scanned)
	}
	return err
}

// readProducerSnapshot reads the snapshot if it describes a prefix of log.
func (r *Replica) readProducerSnapshot(log *segstore.Log, opts producer.Options) (*producer.State, int64) {
	r.producerSnapshotEnd = -1
	b, err := readFileFS(r.deps.FS, filepath.Join(r.dir, producerSnapshotFile), snapshotFileLimit)
	if errors.Is(err, os.ErrNotExist) {
		return nil, 0
	}
	if err != nil {
		r.log.Warn("cannot read the producer snapshot; scanning the log", "error", err)
		// The file may be whole (no descriptor was left, EMFILE), with an
		// end the replica does not know: any truncation removes it, and
		// the next snapshot replaces it. Taken as none, a truncation below
		// its end kept it, and once the log had grown past that end again
		// the next open used it.
		r.producerSnapshotEnd = unknownSnapshotEnd
		return nil, 0
	}
	state, end, err := producer.UnmarshalSnapshot(b, opts)
	if err != nil {
		r.log.Warn("producer snapshot unusable; scanning the log", "error", err)
		return nil, 0
	}
	if end > log.LogEndOffset() {
		r.log.Info("producer snapshot is ahead of the log (its tail was lost); scanning the log",
			"snapshot_end", end, "log_end_offset", log.LogEndOffset())
		// Remove it before anything is appended: a log refilled past end
		// would make it look usable at the next open.
		if err := r.deleteProducerSnapshotFile(); err != nil {
			r.log.Warn("cannot remove the producer snapshot ahead of the log", "error", err)
			r.producerSnapshotEnd = end // removed or overwritten later
		}
		return nil, 0
	}
	r.producerSnapshotEnd = end
	return state, end
}

// errProducerStateRefused is a producer scan's batch that the state it
// builds refuses: the state started from holds batches the log does not.
var errProducerStateRefused = errors.New("agent: producer scan: a batch of the log refused by the producer state")

// scanProducers applies the batches of log from offset on to state, and
// answers how many batches of idempotent producers it applied.
func scanProducers(log *segstore.Log, state *producer.State, from int64, now time.Time) (int, error) {
	applied := 0
	for from < log.LogEndOffset() {
		region, err := log.ReadBytes(from, producerScanBytes, log.LogEndOffset())
		if err != nil {
			return applied, err
		}
		if len(region) == 0 {
			return applied, nil
		}
		for len(region) > 0 {
			batch, rest, err := record.NextBatch(region, len(region))
			if err != nil {
				return applied, fmt.Errorf("agent: producer scan at %d: %w", from, err)
			}
			h := record.Header(batch)
			ok, err := applyProducerBatch(state, h, now)
			if err != nil {
				return applied, fmt.Errorf("%w: at %d: %w", errProducerStateRefused, h.BaseOffset(), err)
			}
			if ok {
				applied++
			}
			from, region = h.NextOffset(), rest
		}
	}
	return applied, nil
}

// applyProducerBatch records one appended batch; false when its producer is
// not idempotent. An error is a batch whose producer fields no producer can
// have written (the leader refuses those before appending).
func applyProducerBatch(state *producer.State, h record.Header, now time.Time) (bool, error) {
	if h.ProducerID() < 0 {
		return false, nil
	}
	if err := state.Apply(producerBatch(h)); err != nil {
		return false, err
	}
	state.Seen(h.ProducerID(), now)
	return true, nil
}

func producerBatch(h record.Header) producer.Batch {
	return producer.Batch{
		ProducerID:    h.ProducerID(),
		ProducerEpoch: h.ProducerEpoch(),
		BaseSequence:  h.BaseSequence(),
		RecordCount:   h.RecordCount(),
		BaseOffset:    h.BaseOffset(),
		LastOffset:    h.LastOffset(),
		LeaderEpoch:   h.LeaderEpoch(),
		MaxTimestamp:  h.MaxTimestamp(),
	}
}

// appliedBatches records what a follower appended: batches, back to back,
// as the leader sent them and the log verified them (CRCs included, so
// only the headers are read again here). A batch the state refuses means
// the state and the log disagree (it holds batches past the log end): left
// so, this replica, once it led, appended a resend of the batch again or
// answered it as a duplicate of records that are not there. The state is
// then rebuilt from the log, as at open, before the follower reports a
// position past the batch; a rebuild that does not reach the log end fails
// the log, whose recovery decides, and appliedBatches reports false.
func (r *Replica) appliedBatches(batches []byte) bool {
	for len(batches) > 0 {
		h, size, err := record.ParseHeader(batches, len(batches))
		if err != nil || size > len(batches) {
			// The log accepted these bytes after the same checks.
			r.log.Error("appended batches do not split; rebuilding the producer state", "error", err)
			return r.rebuildProducers()
		}
		ok, err := applyProducerBatch(r.producers, h, r.deps.Now())
		if err != nil {
			r.log.Error("the producer state disagrees with the log; rebuilding it", "offset", h.BaseOffset(), "error", err)
			// The rebuild reads every batch appended, the rest of these too.
			return r.rebuildProducers()
		}
		r.producersDirty = r.producersDirty || ok
		batches = batches[size:]
	}
	return true
}

// rebuildProducers builds a follower's producer state from its log again,
// and fails the log when the state cannot reach its end.
func (r *Replica) rebuildProducers() bool {
	if err := r.loadProducers(); err != nil {
		r.failLog(fmt.Errorf("agent: producer state rebuilt short of the log end: %w", err))
		return false
	}
	return true
}

// producersTruncated follows a truncation of the log to its new end: the
// snapshot goes first if it describes more than the log now holds.
func (r *Replica) producersTruncated(restart bool) {
	log := r.CurrentLog()
	if r.producerSnapshotEnd > log.LogEndOffset() || restart {
		r.removeProducerSnapshot()
	}
	if restart {
		r.producers = producer.New(r.deps.ProducerOptions)
	} else {
		r.producers.TruncateTo(log.LogEndOffset())
	}
	r.producersDirty = true
}

func (r *Replica) removeProducerSnapshot() {
	if r.producerSnapshotEnd < 0 {
		return
	}
	if err := r.deleteProducerSnapshotFile(); err != nil {
		// A snapshot that stays could describe batches the log lost: the
		// log must not be trusted with it either.
		r.failLog(fmt.Errorf("remove the producer snapshot after a truncation: %w", err))
		return
	}
	r.producerSnapshotEnd = -1
}

// discardProducerSnapshot removes a snapshot that disagrees with the log,
// and answers whether it is gone. One that stays is replaced by the next
// snapshot; until then each open finds it wrong again and scans the log.
func (r *Replica) discardProducerSnapshot() bool {
	if err := r.deleteProducerSnapshotFile(); err != nil {
		r.log.Warn("cannot remove the producer snapshot that disagrees with the log", "error", err)
		return false
	}
	r.producerSnapshotEnd = -1
	return true
}

// deleteProducerSnapshotFile removes the snapshot file, if any, durably.
func (r *Replica) deleteProducerSnapshotFile() error {
	err := r.deps.FS.Remove(filepath.Join(r.dir, producerSnapshotFile))
	if err == nil || errors.Is(err, os.ErrNotExist) {
		err = r.deps.FS.SyncDir(r.dir)
	}
	return err
}

// maintainProducers runs on the retention tick: forget expired producers
// (retention deleting a producer's batches does not forget it:
// producer.State.RemoveBefore), and write the snapshot if anything changed
// or if the log start passed the snapshot's end, which loadProducers would
// not use: the producers retention deleted the batches of are kept across a
// restart too.
func (r *Replica) maintainProducers() {
	if r.logFailed || r.producers == nil {
		return
	}
	log := r.CurrentLog()
	before := r.producers.Len()
	r.producers.RemoveBefore(log.LogStartOffset())
	r.expireProducers(r.producers)
	if r.producers.Len() != before || (r.producers.Len() > 0 && r.producerSnapshotEnd < log.LogStartOffset()) {
		r.producersDirty = true
	}
	if r.producersDirty {
		r.writeProducerSnapshot()
	}
}

// writeProducerSnapshot writes the state as of the log end. A failure
// leaves the previous snapshot, which the open-time scan completes, or the
// new one: the write may fail after its rename (the directory's fsync), and
// the file on disk then says end, now or after a crash maybe.
func (r *Replica) writeProducerSnapshot() {
	end := r.CurrentLog().LogEndOffset()
	if r.producers.Len() == 0 && r.producerSnapshotEnd < 0 {
		r.producersDirty = false
		return
	}
	b, err := r.producers.MarshalSnapshot(nil, end)
	if err != nil {
		r.log.Error("cannot encode the producer snapshot", "error", err)
		return
	}
	if err := writeFileAtomic(r.deps.FS, filepath.Join(r.dir, producerSnapshotFile), b); err != nil {
		r.log.Warn("cannot write the producer snapshot", "error", err)
		// The end a truncation compares with must be the largest the file
		// may hold: kept at the previous snapshot's (or none), a
		// truncation between the two kept the new file, and once the log
		// had grown past its end again with other batches the next open
		// took it for the log's state.
		r.producerSnapshotEnd = max(r.producerSnapshotEnd, end)
		return
	}
	r.producerSnapshotEnd, r.producersDirty = end, false
}

// Bounds of the files readFileFS reads: the size a damaged (or sparse)
// file reports is not allocated. A producer snapshot over its bound is not
// used: the log is scanned instead.
const (
	smallFileLimit    = 1 << 20   // replica.json, meta.json, the markers
	snapshotFileLimit = 256 << 20 // producers.snapshot
)

// readFileFS reads a whole file of at most limit bytes through fsys.
func readFileFS(fsys segstore.FS, name string, limit int64) ([]byte, error) {
	f, err := fsys.OpenFile(name, os.O_RDONLY, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	size, err := f.Size()
	if err != nil {
		return nil, err
	}
	if size > limit {
		return nil, fmt.Errorf("agent: %s is %d bytes, more than the %d it can hold: damaged", name, size, limit)
	}
	b := make([]byte, size)
	if n, err := f.ReadAt(b, 0); n < len(b) {
		if err == nil {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	return b, nil
}

// expireProducers forgets the producers of state past producer.id_expiration,
// and the least recently active beyond producer.max_per_partition, which
// it logs: a resend of theirs after an unknown outcome would be appended
// again, and so many producers are usually a client that makes one per
// request or per process.
func (r *Replica) expireProducers(state *producer.State) {
	if forgot := state.Expire(r.deps.Now()); forgot > 0 {
		r.log.Warn("forgot idempotent producers beyond producer.max_per_partition, the least recently active first (a client making a producer per request or per process?)",
			"forgotten", forgot, "kept", state.Len())
	}
}
