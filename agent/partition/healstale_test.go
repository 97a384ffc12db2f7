package partition

import (
	"context"
	"io"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/hashicorp/go-hclog"
)

// pauseOnLine is an hclog sink that, at the first line holding want,
// hands control to the test (hit) and waits for it to say go on (resume):
// the logging goroutine stops exactly there.
type pauseOnLine struct {
	want   string
	once   sync.Once
	hit    chan struct{}
	resume chan struct{}
}

func (p *pauseOnLine) Write(b []byte) (int, error) {
	if strings.Contains(string(b), p.want) {
		p.once.Do(func() {
			close(p.hit)
			<-p.resume
		})
	}
	return len(b), nil
}

// TestHealStartIsGuardedByWhatItDecidedFrom: a leader decides a re-placing
// from its metadata (n1, n2, n3 with n3 dead: target n1, n2, n4), and the
// start goes out after it. If the partition changed in Consul between the
// two (a move another leader completed: the replicas key moved on to n1,
// n2, n5), the start must be refused, not turned into a move from replicas
// the leader never saw: it moved the partition off n5, the replica the
// other move had just copied. (A topic deleted and created again is the
// same case, its replicas key written anew: TestStartReassignFrom in
// election/ checks it; here the deletion stops the replica, and its
// start with it, first.)
func TestHealStartIsGuardedByWhatItDecidedFrom(t *testing.T) {
	srv, m, coord := startHealing(t, []string{"n2", "n4", "n5"}, "3s", time.Now) // n3 dead
	decided := &pauseOnLine{want: "re-placing replicas", hit: make(chan struct{}), resume: make(chan struct{})}
	started := &logWatch{want: "move started to re-place replicas"}
	refused := &logWatch{want: "re-placing replicas did not start"}
	for _, w := range []io.Writer{decided, started, refused} {
		m.deps.Log.(hclog.InterceptLogger).RegisterSink(hclog.NewSinkAdapter(&hclog.LoggerOptions{Level: hclog.Info, Output: w}))
	}
	const topic = "hstale"
	createTopic(t, coord, topic, [][]string{{"n1", "n2", "n3"}}, 1)
	waitLeading(t, m, topic)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	select {
	case <-decided.hit:
	case <-ctx.Done():
		t.Fatal("the leader never decided to re-place the dead n3")
	}
	// What the completion of a move of n3 to n5 by another leader leaves:
	// replicas n1, n2, n5 (the ISR n1, n2 holds no n3 already), no
	// reassign key.
	kv := srv.Client().KV()
	key := "logagent/topics/" + topic + "/0/replicas"
	pair, _, err := kv.Get(key, nil)
	if err != nil || pair == nil {
		t.Fatalf("read %s: %v, %v", key, pair, err)
	}
	if ok, _, err := kv.CAS(&api.KVPair{Key: key, Value: []byte(`["n1","n2","n5"]`), ModifyIndex: pair.ModifyIndex}, nil); err != nil || !ok {
		t.Fatalf("write %s: %v, %v", key, ok, err)
	}
	close(decided.resume)
	waitFor(t, func() bool { return started.seen.Load() || refused.seen.Load() }, "the start's outcome")
	move, _, err := kv.Get("logagent/topics/"+topic+"/0/reassign", nil)
	if err != nil {
		t.Fatal(err)
	}
	if move != nil {
		t.Fatalf("the re-placing decided from replicas n1,n2,n3 started on replicas n1,n2,n5: %s", move.Value)
	}
	if started.seen.Load() {
		t.Fatal("the re-placing decided from replicas n1,n2,n3 started on replicas n1,n2,n5")
	}
	// Decided again from the metadata that shows n1, n2, n5: nothing is
	// due, nothing moves.
	waitFor(t, func() bool {
		pm, _ := coord.Metadata().Partition(topic, 0)
		return pm.ReplicasIndex > pair.ModifyIndex
	}, "the metadata to show n1, n2, n5")
	time.Sleep(time.Second)
	if pm, _ := coord.Metadata().Partition(topic, 0); pm.Reassign != nil || !slices.Equal(pm.Replicas, []string{"n1", "n2", "n5"}) {
		t.Fatalf("after the refused start the partition is %v with move %+v, want n1,n2,n5 and none", pm.Replicas, pm.Reassign)
	}
}
