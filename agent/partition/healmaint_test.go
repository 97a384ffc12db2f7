package partition

import (
	"slices"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
)

// TestHealingPlacesNoReplicaOnAnAgentInMaintenance: a partition n1, n3
// whose n3 is dead is due for re-placing while the two other agents, n2
// and n4, are in Consul maintenance mode (an operator patching their hosts,
// consul maint -service). They are alive, but a new topic would place no
// partition on them (Client.Agents lists passing agents only), and the
// leader re-placed n3 onto n2 all the same: a copy onto a host about to go
// down. It now waits, says so, and re-places n3 onto the first agent whose
// maintenance ends, n4 (n2, the lower id, was its choice before).
func TestHealingPlacesNoReplicaOnAnAgentInMaintenance(t *testing.T) {
	const after = time.Minute
	clock := &steppedClock{t: time.Now()}
	srv, m, coord := startHealing(t, []string{"n2", "n4"}, after.String(), clock.now) // n3 dead
	waiting := &logWatch{want: "cannot re-place replicas"}
	m.deps.Log.(hclog.InterceptLogger).RegisterSink(hclog.NewSinkAdapter(&hclog.LoggerOptions{Level: hclog.Warn, Output: waiting}))
	consulAgent := srv.Client().Agent()
	for _, id := range []string{"logagent-n2", "logagent-n4"} {
		if err := consulAgent.EnableServiceMaintenance(id, "patching"); err != nil {
			t.Fatal(err)
		}
	}
	// The leader reads the liveness when it starts leading: before that.
	waitFor(t, func() bool { return slices.Equal(coord.Liveness().Placeable(), []string{"n1"}) }, "n2 and n4 in maintenance")
	if alive := coord.Liveness().Alive(); !slices.Equal(alive, []string{"n1", "n2", "n4"}) {
		t.Fatalf("alive %v, want n1, n2, n4: maintenance is not death", alive)
	}
	createTopic(t, coord, "hm", [][]string{{"n1", "n3"}}, 1)
	waitLeading(t, m, "hm")
	waitFor(t, func() bool {
		pm, _ := coord.Metadata().Partition("hm", 0)
		return !slices.Contains(pm.State.ISR, "n3")
	}, "the leader to drop the dead n3 from the ISR")

	clock.step(after)
	waitLoggedWithoutMove(t, coord, "hm", waiting, "with n2 and n4 in maintenance, n3 due for re-placing")

	if err := consulAgent.DisableServiceMaintenance("logagent-n4"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool {
		pm, _ := coord.Metadata().Partition("hm", 0)
		return pm.Reassign != nil
	}, "n3 re-placed once n4's maintenance ended")
	if pm, _ := coord.Metadata().Partition("hm", 0); !slices.Equal(pm.Reassign.Target, []string{"n1", "n4"}) {
		t.Fatalf("n3 re-placed by a move to %v, want n1, n4: n2 is still in maintenance", pm.Reassign.Target)
	}
}
