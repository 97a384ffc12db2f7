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
)

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
}

const (
	produceTimeout = 2 * time.Second
	maxAttempts    = 5
	fetchWait      = 300 * time.Millisecond
	fetchMaxBytes  = 1 << 20
	retryPause     = 50 * time.Millisecond
)

// refusedCodes are API answers given before anything was appended
// (agent/produce.go): the write certainly did not happen, so the same
// value may be retried without risking a duplicate.
var refusedCodes = map[string]bool{
	"not_leader":           true,
	"leader_not_available": true,
	"not_enough_replicas":  true,
	"unknown_topic":        true,
	"unknown_partition":    true,
	"service_unavailable":  true,
	"invalid_request":      true,
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
		wg.Go(func() { w.produce(i, seed, stop) })
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
// advancing *next.
func (w *Workload) decode(decoder *record.Decoder, answer []byte, read *checker.ConsumerRead, next *int64) error {
	batches, err := testcluster.Batches(answer)
	if err != nil {
		return err
	}
	for _, b := range batches {
		it, err := decoder.Records(b)
		if err != nil {
			return err
		}
		for it.Next() {
			r := it.Record()
			if r.Offset < *next {
				continue
			}
			read.Entries = append(read.Entries, checker.Entry{Offset: r.Offset, Value: string(r.Value)})
			*next = r.Offset + 1
		}
		if err := it.Err(); err != nil {
			return err
		}
	}
	return nil
}
