package peer

import (
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
