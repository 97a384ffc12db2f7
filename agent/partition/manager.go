package partition

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/logagent/logagent/agent/peer"
	"github.com/logagent/logagent/election"
	"github.com/logagent/logagent/segstore"
)

// Each partition directory holds, besides segstore's files, the agent's own
// small file naming the partition and the topic incarnation it belongs to:
//
//	<data_dir>/<topic>-<partition>/
//	  replica.json   {"topic":"orders","partition":0,"topic_id":"9f0c...","data_loss":false}
//	  (segstore's segments, indexes and checkpoints)
//
// topic_id tells a topic that was deleted and created again (its epochs
// start over at 0) from the one whose data the directory holds: such data is
// dropped. data_loss records that recovery cut acknowledged data, so the
// replica refuses to lead, across restarts, until it has fetched it again.
// Only directories with a replica.json are ever removed by the agent, and
// only when the metadata proves the data obsolete: the topic incarnation has
// a tombstone (it was deleted through the API), the topic exists with
// another topic_id, or it no longer assigns the partition here. A topic that
// is simply absent from Consul may mean a Consul that lost its data (a dev
// server restarted, a restore from an old snapshot) rather than a deletion,
// so its directories are moved aside into <data_dir>/orphaned/ for the
// operator to delete, never removed.
//
// A partition directory is deleted by renaming it into <data_dir>/deleting/
// (both directories fsynced) and removing it there: removal goes entry by
// entry, and a crash or an error part way through would otherwise leave a
// directory under the partition's name with some of its segments and
// perhaps no replica.json, whose records a new topic of the same name would
// take for its own. What a crash leaves in deleting/ is removed at the next
// start. For the same reason a partition directory without replica.json
// that holds anything is never adopted: it is moved into orphaned/.
const (
	replicaFileName = "replica.json"
	orphanedDirName = "orphaned"
	deletingDirName = "deleting"
)

type replicaFile struct {
	Topic     string `json:"topic"`
	Partition int    `json:"partition"`
	TopicID   string `json:"topic_id"`
	DataLoss  bool   `json:"data_loss"`
}

// readReplicaFile reads dir's replica.json; found is false when dir has
// none, or is not a directory.
func readReplicaFile(fsys segstore.FS, dir string) (replicaFile, bool, error) {
	b, err := readFileFS(fsys, filepath.Join(dir, replicaFileName), smallFileLimit)
	if errors.Is(err, os.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) {
		return replicaFile{}, false, nil
	}
	if err != nil {
		return replicaFile{}, false, fmt.Errorf("agent: read %s: %w", replicaFileName, err)
	}
	var f replicaFile
	if err := json.Unmarshal(b, &f); err != nil {
		return replicaFile{}, false, fmt.Errorf("agent: %s in %s is not valid: %w", replicaFileName, dir, err)
	}
	return f, true, nil
}

func writeReplicaFile(fsys segstore.FS, dir string, f replicaFile) error {
	b, _ := json.Marshal(f)
	return writeFileAtomic(fsys, filepath.Join(dir, replicaFileName), append(b, '\n'))
}

// partitionDir is where a partition's log lives (docs/design.md §5).
func partitionDir(dataDir, topic string, partition int) string {
	return filepath.Join(dataDir, topic+"-"+strconv.Itoa(partition))
}

// openPartitionLog opens (and recovers) a partition's log. Damage below the
// recovery point is cut rather than refused, and reported as dataLoss: the
// replica then fetches the data again instead of staying down. markLoss
// records the loss durably before the cut, so that a crash in between
// cannot forget it; a failure to record it leaves the log uncut.
func openPartitionLog(fsys segstore.FS, dir string, opts segstore.Options, markLoss func() error) (log *segstore.Log, dataLoss bool, err error) {
	log, err = segstore.Open(fsys, dir, opts)
	if errors.Is(err, segstore.ErrDataLoss) {
		opts.Logger.Error("partition lost acknowledged data; cutting it and fetching it again", "dir", dir, "error", err)
		if err := markLoss(); err != nil {
			return nil, false, fmt.Errorf("agent: open partition log %s: record the data loss before cutting it: %w", dir, err)
		}
		opts.RepairDataLoss = true
		log, err = segstore.Open(fsys, dir, opts)
	}
	if err != nil {
		return nil, false, fmt.Errorf("agent: open partition log %s: %w", dir, err)
	}
	return log, log.DataLoss() != nil, nil
}

// MaxRetentionMS is the largest retention in ms a time.Duration holds
// (about 292 years); a topic's retention_ms above it is no bound.
const MaxRetentionMS = math.MaxInt64 / int64(time.Millisecond)

// TopicStorage is a topic's own storage settings, over the agent's
// storage block: the JSON of election.TopicConfig.Storage. The consumer
// groups' offsets topic has them (docs/design.md §7.3), and topics created
// through the Kafka listener with segment.bytes, retention.ms or
// retention.bytes.
type TopicStorage struct {
	SegmentBytes int64 `json:"segment_bytes,omitempty"`
	// NoRetention turns time and size retention off: the topic deletes
	// its own superseded records.
	NoRetention bool `json:"no_retention,omitempty"`
	// RetentionMS and RetentionBytes, when set, replace the agent's
	// storage.retention and storage.retention_bytes; 0 turns each off.
	RetentionMS    *int64 `json:"retention_ms,omitempty"`
	RetentionBytes *int64 `json:"retention_bytes,omitempty"`
}

// LogOptionsFor applies tc's storage settings to the agent's. A setting
// this agent does not know fails the open, rather than being ignored.
func LogOptionsFor(opts segstore.Options, tc election.TopicConfig) (segstore.Options, error) {
	if len(tc.Storage) == 0 {
		return opts, nil
	}
	var ts TopicStorage
	dec := json.NewDecoder(bytes.NewReader(tc.Storage))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&ts); err != nil || ts.SegmentBytes < 0 || (ts.RetentionMS != nil && *ts.RetentionMS < 0) || (ts.RetentionBytes != nil && *ts.RetentionBytes < 0) {
		return opts, fmt.Errorf("agent: topic %s has storage settings this agent cannot apply (%s): %v", tc.Name, tc.Storage, err)
	}
	if ts.SegmentBytes > 0 {
		opts.SegmentBytes = ts.SegmentBytes
	}
	if ts.RetentionMS != nil {
		// Beyond what a Duration holds (a Kafka client's retention.ms of
		// Long.MAX_VALUE, stored by CreateTopics before it was clamped) is
		// no bound: the conversion wrapped around, to a negative retention
		// that failed the log's open or a short one that deleted records.
		opts.Retention = 0
		if *ts.RetentionMS <= MaxRetentionMS {
			opts.Retention = time.Duration(*ts.RetentionMS) * time.Millisecond
		}
	}
	if ts.RetentionBytes != nil {
		opts.RetentionBytes = *ts.RetentionBytes
	}
	if ts.NoRetention {
		opts.Retention, opts.RetentionBytes = 0, 0
	}
	return opts, nil
}

type partitionKey struct {
	topic     string
	partition int
}

func comparePartitionKeys(x, y partitionKey) int {
	if x.topic != y.topic {
		return strings.Compare(x.topic, y.topic)
	}
	return x.partition - y.partition
}

// A partition whose log cannot be opened (no descriptors left, a disk
// error) stays offline on this agent and is opened again with this
// backoff, so it comes back by itself once the cause is gone without
// every metadata change trying all of them at once.
const (
	openRetryMin = 250 * time.Millisecond
	openRetryMax = 30 * time.Second
)

// openRetryDelay is the wait after the attempts-th failed open: doubling
// from openRetryMin, at most openRetryMax.
func openRetryDelay(attempts int) time.Duration {
	// The shift is capped so that it cannot overflow.
	return min(openRetryMin<<min(attempts-1, 16), openRetryMax)
}

// OpenFailure is why a partition the metadata assigns here is offline.
type OpenFailure struct {
	topicID  string
	Err      error
	Attempts int
	RetryAt  time.Time
}

// Manager keeps one replica for every partition the metadata assigns to this
// agent: it opens their logs, hands them metadata, and closes and removes the
// logs of deleted topics.
type Manager struct {
	deps    *Deps
	dataDir string
	log     hclog.Logger

	mu       sync.RWMutex
	replicas map[partitionKey]*Replica
	// failed holds the assigned partitions that are not open.
	failed map[partitionKey]OpenFailure

	// handed is the metadata each open replica was last handed, configs
	// each topic's config and appliedIndex the snapshot's index as of the
	// last apply: the manager's goroutine's own (apply).
	handed       map[partitionKey]replicaMeta
	configs      map[string]election.TopicConfig
	appliedIndex uint64

	// Opens run on openConcurrency workers of their own, off the
	// manager's goroutine, so that the replicas already open are handed
	// newer metadata while thousands of others still open: a follower
	// opened early learns its leader seconds later, not once the last
	// open is done (docs/design.md §5). Under mu: opening holds the
	// partitions queued or being opened, openQueue those waiting for a
	// worker, opened those open but not yet handed metadata (handOpened),
	// openWorkers the workers running, stopping whether Stop has begun.
	opening     map[partitionKey]bool
	openQueue   []openJob
	opened      []partitionKey
	openWorkers int
	stopping    bool
	// retiring says RetireAll has begun: a replica opened since starts
	// retired (it does not campaign).
	retiring bool
	// reapply asks the manager's goroutine to apply the newest metadata
	// whole: an open was skipped (openQueued).
	reapply bool
	// openedSignal wakes the manager's goroutine when an open ends.
	openedSignal chan struct{}
	workers      sync.WaitGroup

	cancel context.CancelFunc
	done   chan struct{}
}

// openJob is a partition to open, as the apply that queued it saw it.
type openJob struct {
	key   partitionKey
	tc    election.TopicConfig
	epoch int32
	prev  OpenFailure
}

// NewManager returns the manager of the partitions under dataDir.
func NewManager(deps *Deps, dataDir string) *Manager {
	deps.moves = &moveLimiter{interval: moveInterval}
	deps.heals = &healLimiter{}
	deps.checkpoints = make(chan struct{}, checkpointConcurrency)
	m := &Manager{deps: deps, dataDir: dataDir, log: deps.Log.Named("partitions"),
		replicas: map[partitionKey]*Replica{}, failed: map[partitionKey]OpenFailure{},
		handed: map[partitionKey]replicaMeta{}, configs: map[string]election.TopicConfig{},
		opening: map[partitionKey]bool{}, openedSignal: make(chan struct{}, 1)}
	deps.sessions = peer.NewSessions(deps.Peers.ForFetches(peer.MaxConns, deps.Config.Replication.FetchMaxWait), deps.Self, deps.Config.Replication.FetchMaxWait, m.leaderAnnounced)
	return m
}

// leaderAnnounced hands a leader agent's leading frame, from its fetch
// session, to the partition's replica here.
func (m *Manager) leaderAnnounced(l peer.Leading) {
	if r := m.Get(l.Topic, l.Partition); r != nil {
		r.leaderAnnounced(followTarget{node: l.Leader, epoch: l.Epoch})
	}
}

// Get returns this agent's replica of a partition, or nil.
func (m *Manager) Get(topic string, partition int) *Replica {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.replicas[partitionKey{topic, partition}]
}

// Offline says why an assigned partition has no replica here: its log
// could not be opened.
func (m *Manager) Offline(topic string, partition int) (OpenFailure, bool) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	f, ok := m.failed[partitionKey{topic, partition}]
	return f, ok
}

// OfflineCount is how many assigned partitions are offline: not open.
func (m *Manager) OfflineCount() int {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return len(m.failed)
}

// nextRetry is when the earliest offline partition is due to be opened
// again.
func (m *Manager) nextRetry() (time.Time, bool) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	var next time.Time
	for _, f := range m.failed {
		if next.IsZero() || f.RetryAt.Before(next) {
			next = f.RetryAt
		}
	}
	return next, !next.IsZero()
}

// Start waits for the first metadata from Consul, opens every local
// partition it assigns here (recovering their logs), handing each replica
// the newest metadata once it is open, removes the local partitions of
// topics that no longer exist once every open has ended, and then follows
// the metadata in the background.
func (m *Manager) Start(ctx context.Context, waitMetadata func(context.Context) (*election.Snapshot, error)) error {
	snap, err := waitMetadata(ctx)
	if err != nil {
		return err
	}
	m.apply(snap)
	reapply := false
	for {
		pending := m.opensPending()
		if m.handOpened(m.deps.Coord.Metadata()) {
			reapply = true
		}
		if !pending {
			break
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-m.openedSignal:
		}
	}
	if err := m.removeStrays(snap); err != nil {
		return err
	}
	runCtx, cancel := context.WithCancel(context.Background())
	m.cancel, m.done = cancel, make(chan struct{})
	go m.run(runCtx, snap, reapply)
	return nil
}

// run follows the metadata: every new snapshot is applied, every replica
// that opened is handed the newest one, and offline partitions are opened
// again when due. reapply asks for an apply of the newest snapshot first.
func (m *Manager) run(ctx context.Context, snap *election.Snapshot, reapply bool) {
	defer close(m.done)
	// Stopped, a timer delivers nothing (Go 1.23 timers), so one serves
	// every wait.
	timer := time.NewTimer(0)
	timer.Stop()
	defer timer.Stop()
	for {
		if !reapply {
			var retry <-chan time.Time
			if at, ok := m.nextRetry(); ok {
				// At least openRetryMin apart, so that thousands of offline
				// partitions, each due at its own instant, are retried in a
				// few rounds rather than one round each.
				timer.Reset(max(at.Sub(m.deps.Now()), openRetryMin))
				retry = timer.C
			}
			select {
			case <-ctx.Done():
				return
			case <-snap.Changed():
			case <-retry:
			case <-m.openedSignal:
				reapply = m.handOpened(m.deps.Coord.Metadata())
				timer.Stop()
				continue
			}
			timer.Stop()
		}
		reapply = false
		snap = m.deps.Coord.Metadata()
		m.apply(snap)
	}
}

// Stop stops following the metadata and stops every replica, closing their
// logs; it returns the errors of the logs that did not close cleanly.
func (m *Manager) Stop() error {
	if m.cancel != nil {
		m.cancel()
		<-m.done
	}
	// Queued opens are dropped; those under way end first, so that their
	// replicas are among the ones stopped here.
	m.mu.Lock()
	m.stopping = true
	for _, job := range m.openQueue {
		delete(m.opening, job.key)
	}
	m.openQueue = nil
	m.mu.Unlock()
	m.workers.Wait()
	m.mu.Lock()
	replicas := m.replicas
	m.replicas = map[partitionKey]*Replica{}
	m.mu.Unlock()
	var wg sync.WaitGroup
	errs := make([]error, 0, len(replicas))
	var errMu sync.Mutex
	for _, r := range replicas {
		wg.Go(func() {
			if err := r.Stop(); err != nil {
				errMu.Lock()
				errs = append(errs, err)
				errMu.Unlock()
			}
		})
	}
	wg.Wait()
	// After the replicas: none sends a fetch any more.
	m.deps.sessions.Close()
	return errors.Join(errs...)
}

// RetireAll, the first step of a graceful stop, keeps every replica from
// campaigning again and hands every leadership over to an in-sync follower
// (handover.go), at most MaxParallelHandovers at a time, each waiting until
// the metadata shows the new leader; it returns once they are all over.
// Leaderships still held when ctx ends step down without a handover. The
// replicas go on following, so leaders elsewhere keep counting them until
// Consul reports the agent gone.
func (m *Manager) RetireAll(ctx context.Context) {
	m.mu.Lock()
	m.retiring = true
	replicas := slices.Collect(maps.Values(m.replicas))
	m.mu.Unlock()
	slots := make(chan struct{}, MaxParallelHandovers)
	var wg sync.WaitGroup
	for _, r := range replicas {
		wg.Go(func() { r.retire(ctx, slots) })
	}
	wg.Wait()
}

// apply brings the replicas in line with a snapshot.
func (m *Manager) apply(snap *election.Snapshot) {
	want := map[partitionKey]replicaMeta{}
	corrupt := map[string]bool{}
	// A replica whose partition and topic did not change since it was last
	// handed them is not handed them again: with thousands of partitions,
	// waking every replica loop on every snapshot (a few keys change at a
	// time) starved the lease's own requests of CPU (docs/design.md §7).
	// After Consul's index went back, equal indexes may name other values:
	// everything is handed again.
	reset := snap.Index < m.appliedIndex
	m.appliedIndex = snap.Index
	configChanged := map[string]bool{}
	for _, name := range snap.Topics() {
		tm, _ := snap.Topic(name)
		if tm.Err != nil {
			corrupt[name] = true
			continue
		}
		if was, ok := m.configs[name]; reset || !ok || !reflect.DeepEqual(was, tm.Config) {
			configChanged[name] = true
			m.configs[name] = tm.Config
		}
		for _, pm := range tm.Partitions {
			if slices.Contains(pm.Replicas, m.deps.Self) {
				want[partitionKey{name, pm.Partition}] = newReplicaMeta(snap, pm, tm.Config)
			}
		}
	}

	m.mu.RLock()
	var gone, absent []partitionKey
	for key, r := range m.replicas {
		meta, ok := want[key]
		_, topicKnown := snap.Topic(key.topic)
		switch {
		case corrupt[key.topic]:
			// Kept as is until the metadata is readable again.
		case !topicKnown && !snap.Deleted(r.topicID):
			absent = append(absent, key)
		case !ok || meta.tc.ID != r.topicID:
			gone = append(gone, key)
		}
	}
	m.mu.RUnlock()
	// All at once: a replica's stop waits for its peer requests in flight
	// (a follower's fetch for up to replication.fetch_max_wait), which one
	// after another would add up over a deleted topic's partitions.
	var removals sync.WaitGroup
	for _, key := range gone {
		removals.Go(func() { m.remove(key, false) })
	}
	for _, key := range absent {
		removals.Go(func() { m.remove(key, true) })
	}
	removals.Wait()

	now := m.deps.Now()
	m.mu.Lock()
	for key, f := range m.failed {
		if meta, ok := want[key]; !ok || meta.tc.ID != f.topicID {
			delete(m.failed, key) // no longer this agent's to open
		}
	}
	m.mu.Unlock()
	// In a stable order, so that an agent short of descriptors opens the
	// same partitions on every start.
	keys := slices.SortedFunc(maps.Keys(want), comparePartitionKeys)
	var budget *fdBudget // measured once there is something to open
	var jobs []openJob
	for _, key := range keys {
		meta := want[key]
		r, opening := m.lookup(key)
		if opening {
			continue // handed the newest metadata once open (handOpened)
		}
		if r != nil {
			if handed, ok := m.handed[key]; ok && !configChanged[key.topic] && sameMeta(handed, meta) {
				continue
			}
			if _, err := LogOptionsFor(m.deps.LogOptions, meta.tc); err != nil {
				// Settings changed to ones this agent cannot apply: offline,
				// as a replica opened with them would be, not ignored.
				delete(m.handed, key)
				m.takeOffline(key, r, meta.tc.ID, err, now)
				continue
			}
			m.handed[key] = meta
			r.setMeta(meta)
			continue
		}
		delete(m.handed, key)
		f, failed := m.Offline(key.topic, key.partition)
		if failed && now.Before(f.RetryAt) {
			continue
		}
		if budget == nil {
			b := measureFDBudget(m.deps.LogOptions.Files)
			budget = &b
		}
		// Its files come out of the file cache's bound, which the
		// budget holds back whole, and its replication out of its
		// peers' fetch sessions: what it adds is a read in use.
		if err := budget.take(fdsPerReplicaReads); err != nil {
			m.openFailed(key, meta.tc.ID, f, err, now)
			continue
		}
		jobs = append(jobs, openJob{key: key, tc: meta.tc, epoch: meta.pm.State.Epoch, prev: f})
	}
	m.startOpens(jobs)
	for key := range m.handed {
		if _, ok := want[key]; !ok {
			delete(m.handed, key)
		}
	}
	for name := range m.configs {
		if _, ok := snap.Topic(name); !ok {
			delete(m.configs, name)
		}
	}
}

// sameMeta reports whether a partition's metadata is as it was handed: the
// same keys at the same Consul indexes (a key's every write moves its
// ModifyIndex), the same leader session and handover hint, and usable as
// before. The topic's config is compared by apply, once per topic.
func sameMeta(a, b replicaMeta) bool {
	return a.usable == b.usable && a.tc.ID == b.tc.ID &&
		a.pm.StateIndex == b.pm.StateIndex && a.pm.ReplicasIndex == b.pm.ReplicasIndex &&
		a.pm.ReassignIndex == b.pm.ReassignIndex && (a.pm.Reassign == nil) == (b.pm.Reassign == nil) &&
		a.pm.LeaderSession == b.pm.LeaderSession && a.pm.Successor == b.pm.Successor &&
		slices.Equal(a.draining, b.draining)
}

// newReplicaMeta is what a replica of pm is handed from snap. Nothing is
// allocated for the draining replicas unless there are some.
func newReplicaMeta(snap *election.Snapshot, pm election.PartitionMeta, tc election.TopicConfig) replicaMeta {
	meta := replicaMeta{pm: pm, tc: tc, usable: true}
	for _, id := range pm.Replicas {
		if snap.IsDraining(id) {
			meta.draining = append(meta.draining, id)
		}
	}
	return meta
}

// openConcurrency bounds the partitions a manager opens at once.
const openConcurrency = 16

// lookup is the replica of key, nil when none is open, and whether an
// open of it is queued or under way.
func (m *Manager) lookup(key partitionKey) (r *Replica, opening bool) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.replicas[key], m.opening[key]
}

// opensPending reports whether opens are queued or under way.
func (m *Manager) opensPending() bool {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return len(m.opening) > 0
}

// startOpens queues jobs, in their order, and starts workers for them, at
// most openConcurrency in all.
func (m *Manager) startOpens(jobs []openJob) {
	if len(jobs) == 0 {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.stopping {
		return
	}
	for _, job := range jobs {
		m.opening[job.key] = true
	}
	m.openQueue = append(m.openQueue, jobs...)
	for range min(openConcurrency-m.openWorkers, len(m.openQueue)) {
		m.openWorkers++
		m.workers.Go(m.openWorker)
	}
}

// openWorker opens queued partitions until the queue is empty or the
// manager stops.
func (m *Manager) openWorker() {
	for {
		m.mu.Lock()
		if m.stopping || len(m.openQueue) == 0 {
			m.openWorkers--
			m.mu.Unlock()
			return
		}
		job := m.openQueue[0]
		m.openQueue[0] = openJob{}
		m.openQueue = m.openQueue[1:]
		if len(m.openQueue) == 0 {
			m.openQueue = nil
		}
		m.mu.Unlock()
		m.openQueued(job)
	}
}

// openQueued opens a queued partition unless the newest metadata no
// longer assigns it here (its topic deleted while it waited, say); the
// manager's goroutine is woken either way: to hand an open replica its
// metadata, to retry a failed open, to apply the metadata again after a
// skipped one (its assignment may have come back meanwhile).
func (m *Manager) openQueued(job openJob) {
	defer func() {
		select {
		case m.openedSignal <- struct{}{}:
		default:
		}
	}()
	if _, ok := m.metaFor(m.deps.Coord.Metadata(), job.key, job.tc.ID); !ok {
		m.mu.Lock()
		delete(m.opening, job.key)
		m.reapply = true
		m.mu.Unlock()
		return
	}
	_, err := m.open(job.key, job.tc, job.epoch)
	if err != nil {
		// Failed before it stops opening: an apply in between would
		// otherwise open it again at once.
		m.openFailed(job.key, job.tc.ID, job.prev, err, m.deps.Now())
	}
	m.mu.Lock()
	delete(m.opening, job.key)
	if err == nil {
		m.opened = append(m.opened, job.key)
	}
	m.mu.Unlock()
}

// metaFor is what this agent's replica of key, of the topic incarnation
// topicID, is handed from snap, and false when snap does not assign key
// here in that incarnation or its topic's metadata is unreadable.
func (m *Manager) metaFor(snap *election.Snapshot, key partitionKey, topicID string) (replicaMeta, bool) {
	tm, ok := snap.Topic(key.topic)
	if !ok || tm.Err != nil || tm.Config.ID != topicID {
		return replicaMeta{}, false
	}
	pm, ok := snap.Partition(key.topic, key.partition)
	if !ok || !slices.Contains(pm.Replicas, m.deps.Self) {
		return replicaMeta{}, false
	}
	return newReplicaMeta(snap, pm, tm.Config), true
}

// handOpened hands the replicas opened since its last call their
// metadata from snap, the newest: a replica is never handed metadata older
// than what it had, and one opened while thousands of others still open
// learns its leader from the snapshot that has it. It reports whether the
// metadata must be applied whole: a replica snap does not assign here any
// more, or whose settings it cannot apply, or a skipped open.
func (m *Manager) handOpened(snap *election.Snapshot) (reapply bool) {
	m.mu.Lock()
	keys := m.opened
	m.opened = nil
	reapply, m.reapply = m.reapply, false
	m.mu.Unlock()
	for _, key := range keys {
		r := m.Get(key.topic, key.partition)
		if r == nil {
			reapply = true
			continue
		}
		meta, ok := m.metaFor(snap, key, r.topicID)
		if !ok {
			reapply = true
			continue
		}
		if _, err := LogOptionsFor(m.deps.LogOptions, meta.tc); err != nil {
			reapply = true
			continue
		}
		m.handed[key] = meta
		r.setMeta(meta)
	}
	return reapply
}

// takeOffline stops an open replica and keeps its partition offline, its
// files in place, as if its open had failed with err.
func (m *Manager) takeOffline(key partitionKey, r *Replica, topicID string, err error, now time.Time) {
	m.mu.Lock()
	delete(m.replicas, key)
	m.mu.Unlock()
	if stopErr := r.Stop(); stopErr != nil {
		m.log.Warn("closing a partition taken offline", "topic", key.topic, "partition", key.partition, "error", stopErr)
	}
	m.openFailed(key, topicID, OpenFailure{}, err, now)
}

// openFailed keeps a partition offline until its next try, logging the
// first failure and any change of cause (every retry of thousands of
// partitions short of descriptors would flood the log).
func (m *Manager) openFailed(key partitionKey, topicID string, prev OpenFailure, err error, now time.Time) {
	f := OpenFailure{topicID: topicID, Err: err, Attempts: prev.Attempts + 1}
	delay := openRetryDelay(f.Attempts)
	f.RetryAt = now.Add(delay)
	m.mu.Lock()
	m.failed[key] = f
	m.mu.Unlock()
	if prev.Err == nil || rootCause(prev.Err).Error() != rootCause(err).Error() {
		m.log.Error("cannot open partition; it stays offline here and is tried again", "topic", key.topic,
			"partition", key.partition, "error", err, "attempts", f.Attempts, "retry_in", delay)
		return
	}
	m.log.Debug("cannot open partition yet", "topic", key.topic, "partition", key.partition,
		"error", err, "attempts", f.Attempts, "retry_in", delay)
}

// rootCause is the innermost error of a chain: the errno under the
// file, step and path an open failed at, which vary from try to try when
// descriptors run out.
func rootCause(err error) error {
	for {
		inner := errors.Unwrap(err)
		if inner == nil {
			return err
		}
		err = inner
	}
}

// open creates or opens the local replica of a partition of the topic
// incarnation topicID, dropping data of an earlier incarnation. epoch is the
// partition's leader epoch in the metadata: a partition that has had a
// leader (epoch above 0) may hold acknowledged records, so a replica that
// finds no directory of it here cannot show it holds what the ISR held and
// starts marked as having lost data (it does not lead, and leaves the ISR
// until it has caught up).
func (m *Manager) open(key partitionKey, tc election.TopicConfig, epoch int32) (*Replica, error) {
	topicID := tc.ID
	opts, err := LogOptionsFor(m.deps.LogOptions, tc)
	if err != nil {
		return nil, err
	}
	dir := partitionDir(m.dataDir, key.topic, key.partition)
	file, found, err := readReplicaFile(m.deps.FS, dir)
	if err != nil {
		return nil, err
	}
	if found && file.TopicID != topicID {
		m.log.Warn("dropping the data of a deleted topic that has the same name", "topic", key.topic,
			"partition", key.partition, "old_id", file.TopicID, "id", topicID)
		if err := m.deleteDir(dir); err != nil {
			return nil, err
		}
		found = false
	}
	if !found {
		if err := m.setAsideUnknown(dir); err != nil {
			return nil, err
		}
		if err := m.deps.FS.MkdirAll(dir, 0o750); err != nil {
			return nil, fmt.Errorf("agent: create %s: %w", dir, err)
		}
		file = replicaFile{Topic: key.topic, Partition: key.partition, TopicID: topicID, DataLoss: epoch > 0}
		if file.DataLoss {
			m.log.Warn("no local data for a partition that has had a leader: treating it as lost; the replica fetches everything again before it may lead or count as in sync",
				"topic", key.topic, "partition", key.partition, "epoch", epoch, "dir", dir)
		}
		if err := writeReplicaFile(m.deps.FS, dir, file); err != nil {
			return nil, fmt.Errorf("agent: write %s: %w", filepath.Join(dir, replicaFileName), err)
		}
	}
	opts.Logger = m.deps.Log.Named("segstore")
	log, lostNow, err := openPartitionLog(m.deps.FS, dir, opts, func() error {
		lost := file
		lost.DataLoss = true
		return writeReplicaFile(m.deps.FS, dir, lost)
	})
	if err != nil {
		return nil, err
	}
	r := newReplica(m.deps, key.topic, key.partition, topicID, dir, log, file.DataLoss)
	// The storage settings the log was opened with: the first metadata
	// handed may have newer ones, which the loop then applies.
	r.meta.tc.Storage = tc.Storage
	if lostNow {
		r.dataLoss = false
		r.setDataLoss(true)
	}
	m.mu.Lock()
	// Under mu with RetireAll's listing: a replica is either retired
	// there or starts retired here.
	r.retiring = m.retiring
	m.replicas[key] = r
	failed := m.failed[key]
	delete(m.failed, key)
	m.mu.Unlock()
	r.start()
	m.log.Info("partition open", "topic", key.topic, "partition", key.partition,
		"log_start_offset", log.LogStartOffset(), "log_end_offset", log.LogEndOffset(),
		"high_watermark", log.HighWatermark(), "data_loss", r.dataLoss, "failed_attempts", failed.Attempts)
	return r, nil
}

// remove stops a replica and deletes its directory, or with quarantine moves
// it into orphaned/.
func (m *Manager) remove(key partitionKey, quarantine bool) {
	m.mu.Lock()
	r := m.replicas[key]
	delete(m.replicas, key)
	m.mu.Unlock()
	if r == nil {
		return
	}
	if err := r.Stop(); err != nil {
		m.log.Warn("closing a deleted partition", "topic", key.topic, "partition", key.partition, "error", err)
	}
	if quarantine {
		if err := m.quarantine(r.dir, r.topicID); err != nil {
			m.log.Error("cannot move aside the partition of a topic Consul no longer has", "dir", r.dir, "error", err)
		}
		return
	}
	if err := m.deleteDir(r.dir); err != nil {
		m.log.Error("cannot remove a deleted partition", "dir", r.dir, "error", err)
		return
	}
	m.log.Info("partition removed", "topic", key.topic, "partition", key.partition, "topic_id", r.topicID)
}

// removeStrays deals with partition directories (those with a replica.json)
// that the metadata no longer assigns here: deleted when their incarnation
// has a tombstone or the topic exists in another incarnation or without this
// replica, moved into orphaned/ when the topic is absent without a tombstone. A topic whose metadata is unreadable keeps its
// directories.
func (m *Manager) removeStrays(snap *election.Snapshot) error {
	m.purgeDeleted()
	names, err := m.deps.FS.ReadDir(m.dataDir)
	if err != nil {
		return fmt.Errorf("agent: list %s: %w", m.dataDir, err)
	}
	for _, name := range names {
		dir := filepath.Join(m.dataDir, name)
		file, found, err := readReplicaFile(m.deps.FS, dir)
		if err != nil {
			m.log.Warn("leaving a partition directory alone", "dir", dir, "error", err)
			continue
		}
		if !found || m.Get(file.Topic, file.Partition) != nil {
			continue
		}
		tm, ok := snap.Topic(file.Topic)
		if !ok && !snap.Deleted(file.TopicID) {
			if err := m.quarantine(dir, file.TopicID); err != nil {
				return err
			}
			continue
		}
		if ok {
			pm, assigned := snap.Partition(file.Topic, file.Partition)
			if tm.Err != nil || (tm.Config.ID == file.TopicID && assigned && slices.Contains(pm.Replicas, m.deps.Self)) {
				continue // unreadable metadata, or a partition that failed to open
			}
		}
		m.log.Warn("removing a partition this agent no longer has: its topic was deleted", "dir", dir,
			"topic", file.Topic, "partition", file.Partition, "topic_id", file.TopicID)
		if err := m.deleteDir(dir); err != nil {
			return err
		}
	}
	return nil
}

// quarantine moves the directory of a partition whose topic Consul does not
// know into <data_dir>/orphaned/, where it stays until an operator deletes
// it.
func (m *Manager) quarantine(dir, topicID string) error {
	target, err := m.moveInto(orphanedDirName, dir, filepath.Base(dir)+"."+topicID)
	if err != nil {
		return err
	}
	m.log.Warn("Consul has no topic for this partition: its data was moved aside, not deleted; delete it once you know the topic is gone for good",
		"moved_to", target)
	return nil
}

// setAsideUnknown moves dir into orphaned/ if it holds anything but what a
// creation cut short leaves (nothing, or replica.json's temporary file):
// called for a partition directory without replica.json, whose files
// cannot be shown to be this partition's (the leftovers of a deletion cut
// short by an older logagent, or files an operator put there).
func (m *Manager) setAsideUnknown(dir string) error {
	names, err := m.deps.FS.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("agent: list %s: %w", dir, err)
	}
	if len(names) == 0 || (len(names) == 1 && names[0] == replicaFileName+".tmp") {
		return nil
	}
	target, err := m.moveInto(orphanedDirName, dir, filepath.Base(dir)+".unknown")
	if err != nil {
		return err
	}
	m.log.Warn("a partition directory without replica.json holds files that cannot be shown to be this partition's: moved aside, not used; delete them once you have looked",
		"moved_to", target, "files", len(names))
	return nil
}

// deleteDir deletes a partition directory: it is renamed into deleting/,
// durably, and then removed there, so that no crash or error leaves part
// of it under its own name. A removal that fails is logged and tried again
// at the next start.
func (m *Manager) deleteDir(dir string) error {
	target, err := m.moveInto(deletingDirName, dir, filepath.Base(dir))
	if err != nil {
		return err
	}
	m.removeDeleted(target)
	return nil
}

// removeDeleted removes a directory in deleting/; a failure is logged and
// left for the next start.
func (m *Manager) removeDeleted(path string) {
	if err := m.deps.FS.RemoveAll(path); err != nil {
		m.log.Warn("cannot remove a deleted partition's files; the next start tries again", "dir", path, "error", err)
	}
}

// purgeDeleted removes what deletions cut short left in deleting/.
func (m *Manager) purgeDeleted() {
	trash := filepath.Join(m.dataDir, deletingDirName)
	names, err := m.deps.FS.ReadDir(trash)
	if err != nil {
		if !errors.Is(err, os.ErrNotExist) {
			m.log.Warn("cannot list the deleted partitions left from before", "dir", trash, "error", err)
		}
		return
	}
	for _, name := range names {
		m.removeDeleted(filepath.Join(trash, name))
	}
}

// moveInto renames dir to <data_dir>/<into>/<name> (name.1, name.2, ... if
// taken) and makes the move durable (both directories fsynced). It returns
// the new path.
func (m *Manager) moveInto(into, dir, name string) (string, error) {
	fsys := m.deps.FS
	parent := filepath.Join(m.dataDir, into)
	if err := fsys.MkdirAll(parent, 0o750); err != nil {
		return "", fmt.Errorf("agent: create %s: %w", parent, err)
	}
	taken, err := fsys.ReadDir(parent)
	if err != nil {
		return "", fmt.Errorf("agent: list %s: %w", parent, err)
	}
	target := name
	for i := 1; slices.Contains(taken, target); i++ {
		target = fmt.Sprintf("%s.%d", name, i)
	}
	target = filepath.Join(parent, target)
	if err := fsys.Rename(dir, target); err != nil {
		return "", fmt.Errorf("agent: move %s into %s: %w", dir, parent, err)
	}
	if err := fsys.SyncDir(parent); err != nil {
		return "", fmt.Errorf("agent: %w", err)
	}
	if err := fsys.SyncDir(m.dataDir); err != nil {
		return "", fmt.Errorf("agent: %w", err)
	}
	return target, nil
}
