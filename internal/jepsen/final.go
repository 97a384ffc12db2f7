package jepsen

import (
	"fmt"
	"time"

	"github.com/logagent/logagent/internal/checker"
	"github.com/logagent/logagent/internal/testcluster"
	"github.com/logagent/logagent/record"
)

// converged reports whether every agent's replica of the partition has
// one high watermark equal to its log end offset.
func converged(c *testcluster.Cluster, topic string, partition int) bool {
	hw := int64(-1)
	for _, a := range c.Agents {
		p, err := a.DescribePartition(topic, partition)
		if err != nil || p.HighWatermark == nil || p.LogEndOffset == nil || *p.HighWatermark != *p.LogEndOffset {
			return false
		}
		if hw >= 0 && *p.HighWatermark != hw {
			return false
		}
		hw = *p.HighWatermark
	}
	return true
}

// WaitConverged polls until every partition has converged on every agent
// or timeout passes, and reports which partitions did not.
func WaitConverged(c *testcluster.Cluster, topic string, partitions int, timeout time.Duration) []int {
	deadline := time.Now().Add(timeout)
	for {
		var pending []int
		for p := range partitions {
			if !converged(c, topic, p) {
				pending = append(pending, p)
			}
		}
		if len(pending) == 0 || time.Now().After(deadline) {
			return pending
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// FinalRead reads every agent's replica of every partition from its
// partition directory on disk, up to the high watermark that agent
// reports for it. Reading the files, rather than fetching, checks what
// each replica holds whatever it would serve: a follower out of the ISR
// refuses fetches, yet its log must still agree below its high watermark.
// Every batch is verified (CRC) on the way. A replica that cannot be read
// is returned in the error list and left out of the logs.
func FinalRead(c *testcluster.Cluster, topic string, partitions int) ([]checker.ReplicaLog, []error) {
	var logs []checker.ReplicaLog
	var errs []error
	decoder := record.NewDecoder(record.Limits{})
	for _, a := range c.Agents {
		for p := range partitions {
			rl, err := readReplica(decoder, a, topic, p)
			if err != nil {
				errs = append(errs, fmt.Errorf("jepsen: replica %s of %s/%d: %w", a.NodeID, topic, p, err))
				continue
			}
			logs = append(logs, rl)
		}
	}
	return logs, errs
}

func readReplica(decoder *record.Decoder, a *testcluster.Agent, topic string, partition int) (checker.ReplicaLog, error) {
	desc, err := a.DescribePartition(topic, partition)
	if err != nil {
		return checker.ReplicaLog{}, err
	}
	if desc.HighWatermark == nil {
		return checker.ReplicaLog{}, fmt.Errorf("jepsen: no high watermark reported")
	}
	rl := checker.ReplicaLog{Node: a.NodeID, Partition: partition, HighWatermark: *desc.HighWatermark}
	b, err := testcluster.LogBytesBelow(a.PartitionDir(topic, partition), rl.HighWatermark)
	if err != nil {
		return rl, err
	}
	batches, err := testcluster.Batches(b)
	if err != nil {
		return rl, err
	}
	for _, batch := range batches {
		it, err := decoder.Records(batch)
		if err != nil {
			return rl, err
		}
		for it.Next() {
			r := it.Record()
			rl.Entries = append(rl.Entries, checker.Entry{Offset: r.Offset, Value: string(r.Value)})
		}
		if err := it.Err(); err != nil {
			return rl, err
		}
	}
	return rl, nil
}
