package peerapi

import (
	"fmt"
	"testing"

	"github.com/logagent/logagent/agent/partition"
	"github.com/logagent/logagent/replicate"
	"github.com/logagent/logagent/segstore"

	"github.com/logagent/logagent/wire"
)

func TestPeerAPIErrorCodes(t *testing.T) {
	tests := []struct {
		err    error
		status int
		code   string
	}{
		{fmt.Errorf("x: %w", replicate.ErrFencedLeaderEpoch), 409, wire.CodeFencedLeaderEpoch},
		{fmt.Errorf("x: %w", replicate.ErrUnknownLeaderEpoch), 412, wire.CodeUnknownLeaderEpoch},
		{partition.ErrNotLeaderHere, 409, wire.CodeNotLeader},
		{replicate.ErrNotLeader, 409, wire.CodeNotLeader},
		{replicate.ErrNotReplica, 403, wire.CodeNotReplica},
		{replicate.ErrInvalidRequest, 400, wire.CodeInvalidRequest},
		{&partition.OutOfRangeError{LogStartOffset: 3, LogEndOffset: 9}, 416, wire.CodeOffsetOutOfRange},
		{segstore.ErrClosed, 503, wire.CodeStorageError},
	}
	for _, tc := range tests {
		e := peerAPIError(tc.err)
		if e.Status != tc.status || e.Code != tc.code {
			t.Errorf("%v: %d %s, want %d %s", tc.err, e.Status, e.Code, tc.status, tc.code)
		}
	}
	e := peerAPIError(&partition.OutOfRangeError{LogStartOffset: 3, LogEndOffset: 9})
	if *e.LogStartOffset != 3 || *e.LogEndOffset != 9 {
		t.Fatalf("out of range bounds %d %d", *e.LogStartOffset, *e.LogEndOffset)
	}
}
