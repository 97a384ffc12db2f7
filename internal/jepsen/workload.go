package jepsen

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"syscall"
	"time"

	"github.com/logagent/logagent/internal/checker"
	"github.com/logagent/logagent/internal/testcluster"
	"github.com/logagent/logagent/record"
	"github.com/logagent/logagent/wire"
)

// Producing is what a producer does about a write whose outcome it could
// not learn.
type Producing int

const (
	// MoveOn records the outcome as unknown and writes the next value; it
	// tries again only a write refused before anything was appended, at
	// the agent the refusal names.
	MoveOn Producing = iota
	// RetryPlain resends every write until it is acknowledged, always
	// through the producer's own sidecar over a link that can be cut
	// (Agent.ClientProxy), with no idempotence: an answer lost after the
	// append makes a duplicate, which the checker must count.
	RetryPlain
	// RetryIdempotent is RetryPlain as an idempotent producer: registered
	// once (POST /v1/producers), it sends every write to an explicit
	// partition with its id, epoch and sequence and resends the same bytes
	// and headers, so the leader answers a resend of an appended write as
	// a duplicate and the final log holds every value once.
	RetryIdempotent
)

func (p Producing) String() string {
	switch p {
	case RetryPlain:
		return "retry until acknowledged, plain"
	case RetryIdempotent:
		return "retry until acknowledged, idempotent"
	}
	return "move on after an unknown outcome"
}

// MarshalText names p in report.json.
func (p Producing) MarshalText() ([]byte, error) { return []byte(p.String()), nil }

// Workload is the clients of a run: Producers write unique values with
// acks=all, each through its own sidecar agent; Consumers read every
// partition, each through another agent.
type Workload struct {
	Cluster    *testcluster.Cluster
	Topic      string
	Partitions int
	Producers  int
	Consumers  int
	// Pinned makes producer i write only partition i / agents (through
	// agent i % agents, as always), instead of a random partition each
	// write.
	Pinned   bool
	Recorder *Recorder
	Seed     uint64
	// EpochMillis is the wall time of the recorder's zero, for record
	// timestamps.
	EpochMillis int64
	// Producing is what producers do about unknown outcomes; RetryPlain
	// and RetryIdempotent need the cluster's proxies.
	Producing Producing

	mu       sync.Mutex
	failures []string
}

const (
	produceTimeout = 2 * time.Second
	maxAttempts    = 5
	fetchWait      = 300 * time.Millisecond
	fetchMaxBytes  = 1 << 20
	retryPause     = 50 * time.Millisecond
)

// retryClientTimeout is how long a retrying producer waits for an answer:
// past the agent's own answer to a request it could not complete
// (ack_timeout, at produceTimeout and a forward's second of grace), so that
// only an answer lost on the way makes it give up.
const retryClientTimeout = produceTimeout + 1500*time.Millisecond

// refusedCodes are API answers given before anything was appended
// (agent/produce.go): the write certainly did not happen, so the same
// value may be retried without risking a duplicate.
var refusedCodes = map[string]bool{
	wire.CodeNotLeader:          true,
	wire.CodeLeaderNotAvailable: true,
	wire.CodeNotEnoughReplicas:  true,
	wire.CodeUnknownTopic:       true,
	wire.CodeUnknownPartition:   true,
	wire.CodeServiceUnavailable: true,
	wire.CodeInvalidRequest:     true,
	wire.CodeTimeoutBeforeWrite: true,
}

// classify maps a produce answer to an outcome, and names the leader's
// client address when the agent pointed at it.
func classify(err error) (checker.Outcome, string) {
	if err == nil {
		return checker.OK, ""
	}
	var apiErr *testcluster.APIError
	if errors.As(err, &apiErr) {
		if refusedCodes[apiErr.Code] {
			return checker.Fail, apiErr.LeaderAddress
		}
		return checker.Unknown, ""
	}
	// A refused connection never reached the agent.
	if errors.Is(err, syscall.ECONNREFUSED) {
		return checker.Fail, ""
	}
	return checker.Unknown, ""
}

// Start runs the clients until stop closes; the returned function waits
// for them to finish.
func (w *Workload) Start(stop <-chan struct{}) (wait func()) {
	var wg sync.WaitGroup
	rng := rand.New(rand.NewPCG(w.Seed, 0x70726f64))
	for i := range w.Producers {
		seed := rng.Uint64()
		if w.Producing == MoveOn {
			wg.Go(func() { w.produce(i, seed, stop) })
		} else {
			wg.Go(func() { w.produceUntilAcknowledged(i, seed, stop) })
		}
	}
	for i := range w.Consumers {
		for p := range w.Partitions {
			wg.Go(func() { w.consume(i, p, stop) })
		}
	}
	return wg.Wait
}

func stopped(stop <-chan struct{}) bool {
	select {
	case <-stop:
		return true
	default:
		return false
	}
}

func (w *Workload) agentAt(clientAddr string) *testcluster.Agent {
	for _, a := range w.Cluster.Agents {
		if a.ClientAddr == clientAddr {
			return a
		}
	}
	return nil
}

func (w *Workload) produce(index int, seed uint64, stop <-chan struct{}) {
	agents := w.Cluster.Agents
	sidecar := agents[index%len(agents)]
	process := fmt.Sprintf("producer%d", index)
	rng := rand.New(rand.NewPCG(seed, uint64(index)))
	for seq := 0; !stopped(stop); seq++ {
		value := fmt.Sprintf("p%d-%d", index, seq)
		partition := rng.IntN(w.Partitions)
		if w.Pinned {
			partition = index / len(agents) % w.Partitions
		}
		target := sidecar
		for attempt := 1; attempt <= maxAttempts && !stopped(stop); attempt++ {
			op := Op{Process: process, Via: target.NodeID, Value: value, Partition: partition, Attempt: attempt, Invoke: w.Recorder.Now()}
			res, err := target.Produce(w.Topic, partition, testcluster.ContentTypeBatch, w.batch(value), "all", produceTimeout)
			outcome, leaderAddr := classify(err)
			op.Outcome = outcome
			if err != nil {
				op.Error = err.Error()
			} else if res.BaseOffset != nil {
				op.Offset = *res.BaseOffset
			} else {
				op.Outcome, op.Error = checker.Unknown, "acknowledged without an offset"
			}
			w.Recorder.Complete(op)
			if op.Outcome != checker.Fail {
				if op.Outcome == checker.Unknown {
					time.Sleep(retryPause)
				}
				break
			}
			// Nothing was written: retry the same value at the leader
			// the agent named, or at the next agent.
			if next := w.agentAt(leaderAddr); next != nil {
				target = next
			} else {
				target = agents[(indexOf(agents, target)+1)%len(agents)]
				time.Sleep(retryPause)
			}
		}
	}
}

// produceUntilAcknowledged is a producer of RetryPlain or RetryIdempotent:
// every write resent, the same bytes and (idempotent) headers, through the
// producer's sidecar until acknowledged or the run stops. A resend the API
// refuses for good ends the producer; for an idempotent one, a refused
// sequence or epoch (which no resend of this workload may meet) is recorded
// and the producer takes a new epoch and goes on with the next value.
func (w *Workload) produceUntilAcknowledged(index int, seed uint64, stop <-chan struct{}) {
	sidecar := w.Cluster.Agents[index%len(w.Cluster.Agents)]
	process := fmt.Sprintf("producer%d", index)
	rng := rand.New(rand.NewPCG(seed, uint64(index)))
	client := testcluster.NewClient(sidecar.ClientProxy.Addr, retryClientTimeout)
	defer client.Close()
	var id testcluster.ProducerID
	next := map[int]int32{} // partition -> sequence of the next write
	if w.Producing == RetryIdempotent {
		var ok bool
		if id, ok = w.register(client, process, nil, stop); !ok {
			return
		}
	}
	for seq := 0; !stopped(stop); seq++ {
		value := fmt.Sprintf("p%d-%d", index, seq)
		partition := rng.IntN(w.Partitions)
		body := w.batch(value)
		var idem *testcluster.Idempotence
		if w.Producing == RetryIdempotent {
			idem = &testcluster.Idempotence{ProducerID: id, Sequence: next[partition]}
		}
		for attempt := 1; !stopped(stop); attempt++ {
			op := Op{Process: process, Via: sidecar.NodeID, Value: value, Partition: partition, Attempt: attempt, Invoke: w.Recorder.Now()}
			res, err := client.Produce(w.Topic, partition, testcluster.ContentTypeBatch, body, produceTimeout, idem)
			op.Outcome, _ = classify(err)
			if err != nil {
				op.Error = err.Error()
			} else if res.BaseOffset != nil {
				op.Offset, op.Duplicate = *res.BaseOffset, res.Duplicate
			} else {
				op.Outcome, op.Error = checker.Unknown, "acknowledged without an offset"
			}
			w.Recorder.Complete(op)
			if op.Outcome == checker.OK {
				if idem != nil {
					next[partition] = record.AddSequence(idem.Sequence, 1)
				}
				break
			}
			switch afterFailure(err, idem != nil) {
			case resend:
				time.Sleep(retryPause)
				continue
			case giveUp:
				w.fail("%s: %s refused for good, resending cannot help: %v", process, value, err)
				return
			}
			w.fail("%s: %s (producer %d epoch %d sequence %d, attempt %d) refused: %v", process, value, idem.ID, idem.Epoch,
				idem.Sequence, attempt, err)
			prev := id
			var ok bool
			if id, ok = w.register(client, process, &prev, stop); !ok {
				return
			}
			clear(next)
			break
		}
	}
}

// step is what a retrying producer does after an attempt that was not
// acknowledged.
type step int

const (
	// resend the same request.
	resend step = iota
	// newEpoch: the leader refused an idempotent producer's sequence or
	// epoch; the same request can never succeed, so the producer takes a
	// new epoch (its sequences start again at 0) and writes the next value.
	newEpoch
	// giveUp: the API refused the request for good (a 4xx that is not
	// retriable): the request is wrong, not its moment.
	giveUp
)

// afterFailure is the step after an attempt that failed with err. Any
// unknown outcome (5xx, a lost connection, a timeout) and any retriable
// refusal is resent.
func afterFailure(err error, idempotent bool) step {
	var apiErr *testcluster.APIError
	switch {
	case !errors.As(err, &apiErr):
		return resend
	case idempotent && (apiErr.Code == wire.CodeOutOfOrderSequence || apiErr.Code == wire.CodeInvalidProducerEpoch):
		return newEpoch
	case apiErr.Status < 500 && !apiErr.Retriable:
		return giveUp
	}
	return resend
}

// register asks the producer's sidecar for an idempotent producer id (prev
// nil) or a new epoch of prev, until it answers or the run stops; ok is
// false when it did not, and a refusal for good is a failure.
func (w *Workload) register(client *testcluster.Client, process string, prev *testcluster.ProducerID, stop <-chan struct{}) (id testcluster.ProducerID, ok bool) {
	for !stopped(stop) {
		id, err := client.InitProducer(prev)
		if err == nil {
			return id, true
		}
		var apiErr *testcluster.APIError
		if errors.As(err, &apiErr) && apiErr.Status < 500 && !apiErr.Retriable {
			w.fail("%s: POST /v1/producers refused: %v", process, err)
			return id, false
		}
		time.Sleep(retryPause)
	}
	return id, false
}

// fail records what a producer met that the run must report as a failure.
func (w *Workload) fail(format string, args ...any) {
	w.mu.Lock()
	w.failures = append(w.failures, fmt.Sprintf(format, args...))
	w.mu.Unlock()
}

// Failures are what fail recorded.
func (w *Workload) Failures() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.failures...)
}

func indexOf(agents []*testcluster.Agent, a *testcluster.Agent) int {
	for i, b := range agents {
		if a == b {
			return i
		}
	}
	return 0
}

func (w *Workload) batch(value string) []byte {
	var b record.Builder
	if err := b.Add(w.EpochMillis+w.Recorder.Now().Milliseconds(), nil, []byte(value), nil); err != nil {
		panic(fmt.Sprintf("jepsen: one small record must fit a batch: %v", err))
	}
	batch, err := b.AppendTo(nil)
	if err != nil {
		panic(fmt.Sprintf("jepsen: one small record must encode: %v", err))
	}
	return batch
}

// consume follows one partition from offset 0 through the consumer's
// sidecar, moving to the next agent when one cannot serve, and records
// what it read in order.
func (w *Workload) consume(index, partition int, stop <-chan struct{}) {
	agents := w.Cluster.Agents
	at := (index + 1) % len(agents)
	read := checker.ConsumerRead{Consumer: fmt.Sprintf("consumer%d", index), Partition: partition}
	defer func() { w.Recorder.Consumed(read) }()
	decoder := record.NewDecoder(record.Limits{})
	var next int64
	for !stopped(stop) {
		f, err := agents[at].Fetch(w.Topic, partition, next, fetchMaxBytes, fetchWait)
		if err != nil {
			at = (at + 1) % len(agents)
			time.Sleep(retryPause)
			continue
		}
		if err := w.decode(decoder, f.Batches, &read, &next); err != nil {
			w.Recorder.Corrupt(read.Consumer, partition, next, fmt.Errorf("from %s: %w", agents[at].NodeID, err))
			at = (at + 1) % len(agents)
		}
	}
}

// decode appends the records of a fetch answer at or after *next to read,
// advancing *next. The batch holding *next may start before it, and its
// records below *next are left out; any other record below *next (a batch
// wholly below it: the server went backwards) is recorded, for the checker
// to find non-monotonic, and a record past *next (records skipped) is an
// error. Leaving out every record below *next had hidden both.
func (w *Workload) decode(decoder *record.Decoder, answer []byte, read *checker.ConsumerRead, next *int64) error {
	batches, err := testcluster.Batches(answer)
	if err != nil {
		return err
	}
	for _, b := range batches {
		holdsNext := record.Header(b).LastOffset() >= *next
		it, err := decoder.Records(b)
		if err != nil {
			return err
		}
		for it.Next() {
			r := it.Record()
			if r.Offset < *next && holdsNext {
				continue
			}
			if r.Offset > *next {
				return fmt.Errorf("records %d to %d skipped: the answer went on at %d", *next, r.Offset-1, r.Offset)
			}
			read.Entries = append(read.Entries, checker.Entry{Offset: r.Offset, Value: string(r.Value)})
			*next = max(*next, r.Offset+1)
		}
		if err := it.Err(); err != nil {
			return err
		}
	}
	return nil
}
