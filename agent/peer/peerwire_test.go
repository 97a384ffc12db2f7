package peer

import (
	"errors"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/logagent/logagent/replicate"

	"github.com/logagent/logagent/wire"
)

func TestPeerFetchRoundTrip(t *testing.T) {
	in := Fetch{
		Topic:     "orders.v2",
		Partition: 11,
		FetchRequest: replicate.FetchRequest{
			ReplicaID:          "n-2",
			FetchOffset:        1 << 40,
			CurrentLeaderEpoch: 7,
			LastFetchedEpoch:   replicate.UndefinedEpoch,
		},
		KnownHighWatermark: 99,
		MaxBytes:           8 << 20,
		MaxWait:            500 * time.Millisecond,
	}
	for _, flags := range []struct{ dataLoss, retiring bool }{{false, false}, {true, false}, {false, true}, {true, true}} {
		in.DataLoss, in.Retiring = flags.dataLoss, flags.retiring
		var args fasthttp.Args
		in.writeArgs(&args)
		var parsed fasthttp.Args
		parsed.Parse(args.String())
		out, err := ParseFetch(&parsed)
		if err != nil || out != in {
			t.Fatalf("round trip: %+v %v\nwant %+v", out, err, in)
		}
	}

	for _, bad := range []string{
		"", // everything missing
		"topic=t&partition=0&replica_id=n2&fetch_offset=-1&current_leader_epoch=1&last_fetched_epoch=0&high_watermark=0&max_bytes=1&max_wait_ms=0",
		"topic=t&partition=0&replica_id=n2&fetch_offset=0&current_leader_epoch=1&last_fetched_epoch=-2&high_watermark=0&max_bytes=1&max_wait_ms=0",
		"topic=t&partition=0&replica_id=n2&fetch_offset=0&current_leader_epoch=1&last_fetched_epoch=0&high_watermark=0&max_bytes=0&max_wait_ms=0",
		"topic=t&partition=0&replica_id=n2&fetch_offset=0&current_leader_epoch=1&last_fetched_epoch=0&high_watermark=0&max_bytes=1&max_wait_ms=60000",
		"topic=t&partition=x&replica_id=n2&fetch_offset=0&current_leader_epoch=1&last_fetched_epoch=0&high_watermark=0&max_bytes=1&max_wait_ms=0",
	} {
		var a fasthttp.Args
		a.Parse(bad)
		if _, err := ParseFetch(&a); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestPeerEpochQueryRoundTrip(t *testing.T) {
	in := EpochQuery{Topic: "t", Partition: 3, EpochRequest: replicate.EpochRequest{ReplicaID: "n3", CurrentLeaderEpoch: 9, Epoch: 4}}
	var args, parsed fasthttp.Args
	in.writeArgs(&args)
	parsed.Parse(args.String())
	if out, err := ParseEpochQuery(&parsed); err != nil || out != in {
		t.Fatalf("round trip: %+v %v", out, err)
	}
}

func TestFetchPositionsRoundTrip(t *testing.T) {
	for _, in := range []FetchPositions{
		{LeaderEpoch: 3, HighWatermark: 10, LogEndOffset: 12, LogStartOffset: 2},
		{LeaderEpoch: 3, HighWatermark: 10, LogEndOffset: 12, LogStartOffset: 2, Diverging: &replicate.EpochEndOffset{Epoch: 1, EndOffset: 7}},
	} {
		var h fasthttp.ResponseHeader
		in.Write(&h)
		out, err := parseFetchPositions(&h)
		if err != nil || out.LeaderEpoch != in.LeaderEpoch || out.HighWatermark != in.HighWatermark ||
			out.LogEndOffset != in.LogEndOffset || out.LogStartOffset != in.LogStartOffset ||
			(in.Diverging == nil) != (out.Diverging == nil) || (in.Diverging != nil && *in.Diverging != *out.Diverging) {
			t.Fatalf("round trip of %+v: %+v %v", in, out, err)
		}
	}
	var h fasthttp.ResponseHeader
	h.Set(wire.HeaderLeaderEpoch, "3")
	if _, err := parseFetchPositions(&h); err == nil {
		t.Fatal("headers without positions accepted")
	}
}

// TestFetchPositionsOutOfRange: the GET fetch's position headers have the
// session answer frame's ranges. They were cut to int32 unchecked (an epoch
// of 2^32+7 read as 7, the epoch the follower follows) and negative
// offsets passed.
func TestFetchPositionsOutOfRange(t *testing.T) {
	for name, set := range map[string]func(h *fasthttp.ResponseHeader){
		"leader epoch 2^32+7": func(h *fasthttp.ResponseHeader) { h.Set(wire.HeaderLeaderEpoch, "4294967303") },
		"negative HW":         func(h *fasthttp.ResponseHeader) { h.Set(wire.HeaderHighWatermark, "-1") },
		"diverging epoch 2^32": func(h *fasthttp.ResponseHeader) {
			h.Set(wire.HeaderDivergingEpoch, "4294967296")
			h.Set(wire.HeaderDivergingEndOffset, "3")
		},
	} {
		var h fasthttp.ResponseHeader
		FetchPositions{LeaderEpoch: 7, EpochStartOffset: 1, HighWatermark: 2, LogEndOffset: 3}.Write(&h)
		set(&h)
		if pos, err := parseFetchPositions(&h); err == nil {
			t.Errorf("%s: parsed as %+v (diverging %+v)", name, pos, pos.Diverging)
		}
	}
}

// TestOutOfRangeErrorWithoutBounds: an offset_out_of_range answer of the
// GET fetch without the leader's log bounds is no truncation order: read
// as [0, 0), it would have the follower cut its log to 0.
func TestOutOfRangeErrorWithoutBounds(t *testing.T) {
	for _, tc := range []struct {
		body     string
		wantCode string
	}{
		{body: `{"error":{"code":"offset_out_of_range","message":"m","log_start_offset":4,"log_end_offset":9}}`, wantCode: wire.CodeOffsetOutOfRange},
		{body: `{"error":{"code":"offset_out_of_range","message":"m"}}`, wantCode: wire.CodeInternal},
		{body: `{"error":{"code":"offset_out_of_range","message":"m","log_start_offset":4}}`, wantCode: wire.CodeInternal},
	} {
		var resp fasthttp.Response
		resp.SetStatusCode(fasthttp.StatusRequestedRangeNotSatisfiable)
		resp.SetBodyString(tc.body)
		var e *Error
		if !errors.As(decodePeerError(&resp), &e) || e.Code != tc.wantCode {
			t.Errorf("%s: decoded as %+v, want code %s", tc.body, e, tc.wantCode)
		}
	}
}
