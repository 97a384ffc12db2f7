package kafkabroker

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/logagent/logagent/agent/reply"
	"github.com/logagent/logagent/kafka"
)

// deadlineSidecar answers every group operation at once and notes the
// deadline each one was routed under.
type deadlineSidecar struct {
	Sidecar
	mu        sync.Mutex
	deadlines map[string]time.Time
}

func (s *deadlineSidecar) RunGroupOp(ctx context.Context, name, _ string, _ []byte, _ time.Duration) ([]byte, *reply.APIError) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.deadlines[name], _ = ctx.Deadline()
	switch name {
	case "offsets":
		return []byte(`{"offsets":[]}`), nil
	case "classic_join", "classic_sync":
		return []byte(`{"error_code":0,"result":{"done":true}}`), nil
	case "classic_leave":
		return []byte(`{"error_code":0,"result":{"unknown":[false]}}`), nil
	}
	return []byte(`{"error_code":0}`), nil
}

// TestGroupOpsRouteUnderTheRequestsDeadline: the Kafka listener's group
// operations reach the routing with the request's deadline, which bounds
// how long the sidecar retries an unavailable coordinator. Routed without
// it, an OffsetCommit the client had timed out on was retried for the
// sidecar's own 15 s and could land after the client's next commit.
func TestGroupOpsRouteUnderTheRequestsDeadline(t *testing.T) {
	s := &deadlineSidecar{deadlines: map[string]time.Time{}}
	g := New(Config{Sidecar: s, Now: time.Now}).Groups()
	for _, tc := range []struct {
		op   string
		call func(ctx context.Context) error
	}{
		{"classic_commit", func(ctx context.Context) error {
			return g.CommitOffsets(ctx, kafka.CommitRequest{Group: "g", MemberID: "m", Generation: 1,
				Offsets: []kafka.OffsetCommit{{Topic: "t", Partition: 0, Offset: 5}}})
		}},
		{"classic_heartbeat", func(ctx context.Context) error { return g.Heartbeat(ctx, "g", "m", 1) }},
		{"classic_join", func(ctx context.Context) error {
			_, err := g.JoinGroup(ctx, kafka.JoinGroupRequest{Group: "g", MemberID: "m", ProtocolType: "consumer"})
			return err
		}},
		{"classic_sync", func(ctx context.Context) error {
			_, err := g.SyncGroup(ctx, kafka.SyncGroupRequest{Group: "g", MemberID: "m", Generation: 1})
			return err
		}},
		{"classic_leave", func(ctx context.Context) error {
			_, err := g.LeaveGroup(ctx, "g", []string{"m"})
			return err
		}},
		{"classic_describe", func(ctx context.Context) error { _, err := g.DescribeGroup(ctx, "g"); return err }},
		{"offsets", func(ctx context.Context) error { _, err := g.FetchOffsets(ctx, "g"); return err }},
	} {
		t.Run(tc.op, func(t *testing.T) {
			want := time.Now().Add(7 * time.Second)
			ctx, cancel := context.WithDeadline(context.Background(), want)
			defer cancel()
			if err := tc.call(ctx); err != nil {
				t.Fatal(err)
			}
			s.mu.Lock()
			got, ok := s.deadlines[tc.op]
			s.mu.Unlock()
			if !ok || !got.Equal(want) {
				t.Errorf("%s routed with deadline %v (called: %v), want the request's %v", tc.op, got, ok, want)
			}
		})
	}
}
