package kafkabroker

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/logagent/logagent/election"
)

// producerIDCoordinator is an allocator that knows ids below next, each at
// the last epoch it handed out.
type producerIDCoordinator struct {
	Coordinator
	mu     sync.Mutex
	next   int64
	epochs map[int64]int16
}

func (c *producerIDCoordinator) AllocateProducerID(context.Context) (int64, int16, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	id := c.next
	c.next++
	c.epochs[id] = 0
	return id, 0, nil
}

// BumpProducerEpoch is the allocator's bump, which the listener used for a
// request naming an id.
func (c *producerIDCoordinator) BumpProducerEpoch(_ context.Context, id int64) (int64, int16, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.epochs[id]
	if !ok {
		return 0, 0, fmt.Errorf("%w: %d", election.ErrUnknownProducerID, id)
	}
	c.epochs[id] = e + 1
	return id, e + 1, nil
}

type servingSidecar struct{ Sidecar }

func (servingSidecar) Serving() error { return nil }

// TestInitProducerIDNamingAnIdGetsANewOne: an InitProducerId without a
// transactional id that names the id and epoch the producer used last
// (v3+, KIP-360) is answered with a new id at epoch 0, as Kafka's
// coordinator answers every such request. The listener bumped the named
// id's epoch in the allocator instead: an epoch the producer had bumped
// itself (kgo and the Java producer bump an idempotent producer's epoch
// locally) came back older than the one the leaders had seen, which they
// refuse as INVALID_PRODUCER_EPOCH; an id this cluster never handed out
// was the fatal UNKNOWN_PRODUCER_ID; and a stale id of another producer
// got that producer's next epoch, fencing it and sharing its sequences.
func TestInitProducerIDNamingAnIdGetsANewOne(t *testing.T) {
	coord := &producerIDCoordinator{next: 10, epochs: map[int64]int16{3: 0}}
	cl := kgoAgainst(t, New(Config{Sidecar: servingSidecar{}, Coordinator: coord}))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	tests := []struct {
		name  string
		id    int64
		epoch int16
	}{
		{"first", -1, -1},
		{"an id the allocator knows, at an epoch the producer bumped itself", 3, 5},
		{"an id the allocator knows, at its epoch", 3, 0},
		{"an id never handed out", 99, 2},
	}
	seen := map[int64]bool{}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := kmsg.NewPtrInitProducerIDRequest()
			req.ProducerID, req.ProducerEpoch = tt.id, tt.epoch
			resp, err := cl.SeedBrokers()[0].Request(ctx, req)
			if err != nil {
				t.Fatal(err)
			}
			r := resp.(*kmsg.InitProducerIDResponse)
			if req.Version < 3 {
				t.Fatalf("InitProducerId sent at v%d, which carries no producer id", req.Version)
			}
			if r.ErrorCode != 0 || r.ProducerEpoch != 0 || r.ProducerID < 10 || seen[r.ProducerID] {
				t.Fatalf("InitProducerId v%d naming id %d epoch %d: error %v, id %d, epoch %d; want a new id (10 or above) at epoch 0",
					req.Version, tt.id, tt.epoch, kerr.ErrorForCode(r.ErrorCode), r.ProducerID, r.ProducerEpoch)
			}
			seen[r.ProducerID] = true
		})
	}
}
