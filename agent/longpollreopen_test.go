package agent

import (
	"context"
	"fmt"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/logagent/logagent/internal/consultest"
	"github.com/logagent/logagent/segstore"
	"github.com/logagent/logagent/wire"
)

// TestLongPollFollowsAReopenedLog: a fetch long-polling a replica whose log
// fails and is reopened meanwhile (an fsync refused; the replica cuts its log
// to the last good fsync and refetches) waits on the log the replica has
// now. Both waited on the failed log until their wait ended, whatever the
// new log held. The HTTP fetch goes on waiting on the new log and answers
// once it holds the offset; a Kafka fetch answers from the new log at once.
func TestLongPollFollowsAReopenedLog(t *testing.T) {
	const topic, polledOffset = "reopened", 2
	const wait = wire.MaxClientWait
	for _, tc := range []struct {
		name string
		// poll long-polls the agent's replica at polledOffset and says
		// whether its answer held that offset.
		poll        func(t *testing.T, ta *testAgent, kafkaAddr string) (bool, error)
		wantRecords bool
	}{
		{"http", func(t *testing.T, ta *testAgent, _ string) (bool, error) {
			status, body := ta.call("GET", fmt.Sprintf("/v1/topics/%s/partitions/0/records?offset=%d&wait=%s", topic, polledOffset, wait), "", nil)
			if status != 200 {
				return false, fmt.Errorf("%d %s", status, body)
			}
			_, ok := decodeValues(t, body)[polledOffset]
			return ok, nil
		}, true},
		{"kafka", func(t *testing.T, _ *testAgent, kafkaAddr string) (bool, error) {
			cl, err := kgo.NewClient(kgo.SeedBrokers(kafkaAddr))
			if err != nil {
				return false, err
			}
			defer cl.Close()
			req := kmsg.NewPtrFetchRequest()
			req.Version, req.MaxWaitMillis, req.MinBytes, req.MaxBytes = 11, int32(wait.Milliseconds()), 1, 1<<20
			rt := kmsg.NewFetchRequestTopic()
			rt.Topic = topic
			rp := kmsg.NewFetchRequestTopicPartition()
			rp.FetchOffset, rp.PartitionMaxBytes = polledOffset, 1<<20
			rt.Partitions = append(rt.Partitions, rp)
			req.Topics = append(req.Topics, rt)
			ctx, cancel := context.WithTimeout(context.Background(), 2*wait)
			defer cancel()
			resp, err := req.RequestWith(ctx, cl)
			if err != nil {
				return false, err
			}
			p := resp.Topics[0].Partitions[0]
			switch p.ErrorCode {
			case 0:
			case kerr.NotLeaderForPartition.Code:
				// The leadership moved while it waited: answered, and a
				// client fetches again.
				return false, nil
			default:
				return false, fmt.Errorf("error code %d", p.ErrorCode)
			}
			return len(p.RecordBatches) > 0, nil
		}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newTestCluster(t, 3, "replication { auto_leader_rebalance = false }", nil)
			faults := map[*testAgent]*segstore.FaultFS{}
			kafkaAddrs := map[*testAgent]string{}
			for _, ta := range c.agents {
				faults[ta] = ta.useFaultFS()
				kafkaAddrs[ta] = fmt.Sprintf("127.0.0.1:%d", consultest.FreePorts(t, 1)[0])
				ta.configs = append(ta.configs, writeTestFile(t, filepath.Join(t.TempDir(), "kafka.hcl"), fmt.Sprintf("kafka { address = %q }\n", kafkaAddrs[ta])))
			}
			for _, ta := range c.agents {
				ta.start()
			}
			c.createTopic(c.agents[0], topic, 1, 3, 2)
			leader, _ := c.waitLeader(topic, 0, 3)
			leader.mustProduce(topic, 0, "a", "b")
			c.waitCaughtUp(topic, 0, polledOffset)

			type answer struct {
				hasOffset bool
				err       error
				after     time.Duration
			}
			polled := make(chan answer, 1)
			start := time.Now()
			go func() {
				ok, err := tc.poll(t, leader, kafkaAddrs[leader])
				polled <- answer{ok, err, time.Since(start)}
			}()
			// Nothing tells when the poll is parked; a poll that started
			// after the reopen would wait on the new log and pass either way.
			time.Sleep(500 * time.Millisecond)

			// The leader's next fsync fails: it steps down, reopens its log
			// (cut to its last good fsync) and refetches from the new leader.
			faults[leader].Inject(segstore.Fault{Op: segstore.OpSync, Path: filepath.Join(topic+"-0", "00000000000000000000.log"), Err: syscall.ENOSPC})
			leader.produce(topic, 0, "acks=all", wire.ContentTypeNDJSON, []byte("c"))
			newLeader, _ := c.waitLeader(topic, 0, -1)
			if newLeader == leader {
				t.Fatalf("%s still leads after its fsync failed", leader.nodeID)
			}
			newLeader.mustProduce(topic, 0, "d")

			select {
			case a := <-polled:
				if a.err != nil {
					t.Fatalf("the long poll failed after %s: %v", a.after.Round(time.Millisecond), a.err)
				}
				if tc.wantRecords && !a.hasOffset {
					t.Fatalf("the long poll answered after %s without offset %d", a.after.Round(time.Millisecond), polledOffset)
				}
				t.Logf("the long poll answered after %s (offset %d in it: %t)", a.after.Round(time.Millisecond), polledOffset, a.hasOffset)
			case <-time.After(wait / 2):
				t.Fatalf("no answer to the long poll %s after the old leader's fsync failed (its wait is %s): it waits on the failed log", wait/2, wait)
			}
		})
	}
}
