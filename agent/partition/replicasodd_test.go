package partition

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/logagent/logagent/internal/consultest"
)

// TestOddReplicasKeyInConsul: the replicas key is edited by hand. Naming
// a member twice leaves the same set: the partition is led as before, the
// leader stays at its epoch and takes acks=all writes (before, the
// leader's state machine refused the repeat and stepped down, won the
// next epoch, met it again: the epoch went from 1 to 5 within 5 s and the
// partition took no writes). An empty replica id, and fewer replicas than
// min_insync_replicas (which no leader accepts), are corrupt metadata: the
// topic is not led until the key is repaired, and no epoch is spent on it
// (before, both climbed the same way).
func TestOddReplicasKeyInConsul(t *testing.T) {
	for _, tt := range []struct {
		name     string
		replicas []string
		led      bool
	}{
		{"a member twice", []string{"n1", "n2", "n2", "n3"}, true},
		{"an empty id", []string{"n1", "", "n3"}, false},
		{"fewer than min_insync_replicas", []string{"n1"}, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			srv := consultest.Start(t)
			n2 := startElectionOnly(t, srv, "n2")
			startElectionOnly(t, srv, "n3")
			const topic = "oddreplicas"
			createTopic(t, n2, topic, [][]string{{"n1", "n2", "n3"}}, 2)
			value, err := json.Marshal(tt.replicas)
			if err != nil {
				t.Fatal(err)
			}
			key := "logagent/topics/" + topic + "/0/replicas"
			if _, err := srv.Client().KV().Put(&api.KVPair{Key: key, Value: value}, nil); err != nil {
				t.Fatal(err)
			}
			m, _ := startManager(t, srv, "n1", "", time.Now)
			epoch := consulState(t, srv, topic).Epoch
			if tt.led {
				waitFor(t, func() bool { return consulState(t, srv, topic).Leader == "n1" }, "n1 elected")
				epoch = consulState(t, srv, topic).Epoch
			}
			time.Sleep(5 * time.Second)
			if st := consulState(t, srv, topic); st.Epoch != epoch {
				t.Fatalf("epoch went from %d to %d within 5s (leader %q), want it to stay", epoch, st.Epoch, st.Leader)
			}
			if !tt.led {
				if st := consulState(t, srv, topic); st.Leader != "" {
					t.Fatalf("%q leads a topic whose replicas key is corrupt", st.Leader)
				}
				return
			}
			r := waitLeading(t, m, topic)
			follow(t, r, "n2", 0, epoch)
			follow(t, r, "n3", 0, epoch)
			acked := appendAcksAll(t, r, "a")
			follow(t, r, "n2", 1, epoch)
			follow(t, r, "n3", 1, epoch)
			if out := <-acked; out.Err != nil {
				t.Fatalf("acks=all write answered %v", out.Err)
			}
		})
	}
}
