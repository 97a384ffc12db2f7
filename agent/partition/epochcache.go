package partition

import (
	"github.com/logagent/logagent/replicate"
	"github.com/logagent/logagent/segstore"
)

// epochCache shows a segstore log's leader epoch cache to the replicate
// state machines, whose EpochCache reports "not found" with a bool where
// segstore answers UndefinedEpoch.
type epochCache struct {
	log *segstore.Log
}

var _ replicate.EpochCache = epochCache{}

func (c epochCache) LatestEpoch() (int32, bool) {
	e, ok := c.log.LatestEpoch()
	return e.Epoch, ok
}

func (c epochCache) EndOffsetForEpoch(epoch int32) (int32, int64, bool) {
	found, end := c.log.EndOffsetForEpoch(epoch)
	if found == segstore.UndefinedEpoch {
		return 0, 0, false
	}
	return found, end, true
}
