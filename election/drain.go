package election

import (
	"context"
	"fmt"
	"maps"
	"slices"

	"github.com/hashicorp/consul/api"
)

// Draining lists the node ids of the agents being drained, sorted
// (docs/design.md §7.7): partition leaders move their replicas away, and
// no move picks them as a target.
func (s *Snapshot) Draining() []string { return slices.Sorted(maps.Keys(s.draining)) }

// IsDraining says whether the agent with this node id is being drained.
func (s *Snapshot) IsDraining(node string) bool { return s.draining[node] > 0 }

// DrainIndex is the ModifyIndex of the agent's drain key, 0 when it is not
// being drained: a move a drain causes is started guarded by it
// (DecidedFrom.Draining).
func (s *Snapshot) DrainIndex(node string) uint64 { return s.draining[node] }

// SetDraining marks the agent with this node id as being drained (on) or
// no longer (off). The key is a flag: every move it causes is a
// reassignment whose start checks the key at the index it was decided
// from (DecidedFrom.Draining), so setting it needs no guard.
// A node id that is not one is ErrInvalidTopic.
func (c *Client) SetDraining(ctx context.Context, node string, on bool) error {
	if !nodeIDPattern.MatchString(node) {
		return fmt.Errorf("%w: node id %q", ErrInvalidTopic, node)
	}
	key := c.keys.draining(node)
	op := &api.KVTxnOp{Verb: api.KVDelete, Key: key}
	if on {
		op = &api.KVTxnOp{Verb: api.KVSet, Key: key, Value: encodeJSON(map[string]string{"node": node})}
	}
	what := fmt.Sprintf("drain %s (%v)", node, on)
	ok, resp, err := c.txn(ctx, api.TxnOps{{KV: op}}, what, keyRule(c.keys.prefix))
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("%w: %s: %s", ErrConflict, what, txnErrors(resp))
	}
	c.log.Info("drain changed", "node", node, "draining", on)
	return nil
}
