package peer

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/valyala/fasthttp"

	"github.com/logagent/logagent/replicate"
)

// FuzzReadSessionRequest: whatever a follower sends, the leader's reader
// returns frames or an error (never a panic, never a body past its bound),
// and every fetch or forget it accepts encodes back to the same frame.
func FuzzReadSessionRequest(f *testing.F) {
	fetch := Fetch{Topic: "orders", Partition: 3, FetchRequest: replicate.FetchRequest{ReplicaID: "n2", FetchOffset: 1200,
		CurrentLeaderEpoch: 7, LastFetchedEpoch: replicate.UndefinedEpoch, DataLoss: true}, KnownHighWatermark: 1100, MaxBytes: 8 << 20}
	var all []byte
	all = AppendFetchFrame(all, 1, fetch)
	withID := fetch
	withID.TopicID = "0123456789abcdef0123456789abcdef"
	all = AppendFetchFrame(all, 2, withID)
	all = AppendForgetFrame(all, "orders", 3)
	all = AppendPingFrame(all)
	f.Add(all)
	f.Add(AppendFetchFrame(nil, 1<<32-1, Fetch{Topic: strings.Repeat("t", maxTopicLen), Partition: 1<<31 - 1, MaxBytes: 1<<31 - 1,
		FetchRequest: replicate.FetchRequest{FetchOffset: 1<<63 - 1, CurrentLeaderEpoch: 1<<31 - 1, Retiring: true}}))
	f.Add(AppendAnswerHeader(nil, 1, FetchPositions{}, 0))
	f.Add([]byte{0x80, 0, 0, 0, frameFetch})
	f.Fuzz(func(t *testing.T, data []byte) {
		r := bufio.NewReader(bytes.NewReader(data))
		var buf []byte
		for range 64 {
			req, body, err := ReadSessionRequest(r, buf, "n2")
			buf = body
			if err != nil {
				if !errors.Is(err, ErrBadFrame) && !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) {
					t.Fatalf("unexpected error kind: %v", err)
				}
				return
			}
			if len(body) > maxRequestFrame {
				t.Fatalf("a body of %d bytes passed the bound %d", len(body), maxRequestFrame)
			}
			switch req.Kind {
			case SessionFetch:
				g := req.Fetch
				if g.Topic == "" || g.Partition < 0 || g.FetchOffset < 0 || g.KnownHighWatermark < 0 || g.CurrentLeaderEpoch < 0 ||
					g.LastFetchedEpoch < replicate.UndefinedEpoch || g.MaxBytes < 1 || g.MaxBytes > 1<<31-1 || g.ReplicaID != "n2" {
					t.Fatalf("accepted an out-of-range fetch %+v", g)
				}
				again := AppendFetchFrame(nil, req.ID, g)
				if !bytes.Equal(again[frameHeaderLen:], body) {
					t.Fatalf("fetch %+v encodes to %x, read from %x", g, again[frameHeaderLen:], body)
				}
			case SessionForget:
				again := AppendForgetFrame(nil, req.Fetch.Topic, req.Fetch.Partition)
				if !bytes.Equal(again[frameHeaderLen:], body) {
					t.Fatalf("forget %+v encodes to %x, read from %x", req.Fetch, again[frameHeaderLen:], body)
				}
			case SessionPing:
				if len(body) != 0 {
					t.Fatalf("ping with %d bytes", len(body))
				}
			default:
				t.Fatalf("kind %d without an error", req.Kind)
			}
		}
	})
}

// FuzzLeaderFrame: whatever a leader sends, the follower's decoders return
// a frame or an error, never a panic or a body past the reader's bound, and
// the values they accept are in range.
func FuzzLeaderFrame(f *testing.F) {
	const maxLen = 1 << 16
	pos := FetchPositions{LeaderEpoch: 7, EpochStartOffset: 1150, HighWatermark: 1200, LogEndOffset: 1350, LogStartOffset: 0}
	f.Add(append(AppendAnswerHeader(nil, 2, pos, 5), "batch"...))
	pos.Diverging = &replicate.EpochEndOffset{Epoch: 5, EndOffset: 1187}
	f.Add(AppendAnswerHeader(nil, 3, pos, 0))
	f.Add(AppendRefusalFrame(nil, 4, &Error{Status: 416, Code: "offset_out_of_range", Message: "m", LogStartOffset: 4, LogEndOffset: 9}))
	f.Add(AppendLeadingFrame(nil, Leading{Topic: "orders", Partition: 2, Epoch: 8, Leader: "n1"}))
	f.Add(AppendPingFrame(nil))
	f.Fuzz(func(t *testing.T, data []byte) {
		typ, body, err := readFrame(bufio.NewReader(bytes.NewReader(data)), maxLen, nil)
		if err != nil {
			return
		}
		if len(body) > maxLen {
			t.Fatalf("a body of %d bytes passed the bound %d", len(body), maxLen)
		}
		switch typ {
		case frameAnswer:
			id, p, batches, err := parseAnswerFrame(body)
			if err != nil {
				return
			}
			if p.LeaderEpoch < 0 || p.HighWatermark < 0 || p.LogEndOffset < 0 || p.LogStartOffset < 0 || p.EpochStartOffset < 0 {
				t.Fatalf("accepted negative positions %+v", p)
			}
			again := append(AppendAnswerHeader(nil, id, p, int64(len(batches))), batches...)
			if !bytes.Equal(again[frameHeaderLen:], body) {
				t.Fatalf("answer re-encodes differently")
			}
		case frameRefusal:
			_, e, err := parseRefusalFrame(body)
			if err == nil && (e.Code == "" || len(e.Code) > maxRefusalText || len(e.Message) > maxRefusalText || e.LogStartOffset < 0 || e.LogEndOffset < 0) {
				t.Fatalf("accepted refusal %+v", e)
			}
		case frameLeading:
			l, err := parseLeadingFrame(body)
			if err == nil && (l.Topic == "" || l.Leader == "" || l.Epoch < 0 || l.Partition < 0) {
				t.Fatalf("accepted leading %+v", l)
			}
		}
	})
}

// FuzzParseFetch: the GET fetch's query parameters parse into a fetch in
// range or an error.
func FuzzParseFetch(f *testing.F) {
	var a fasthttp.Args
	Fetch{Topic: "t", Partition: 1, FetchRequest: replicate.FetchRequest{ReplicaID: "n2", FetchOffset: 5, CurrentLeaderEpoch: 2,
		LastFetchedEpoch: -1}, KnownHighWatermark: 3, MaxBytes: 1 << 20}.writeArgs(&a)
	f.Add(a.String())
	f.Add("topic=t&partition=1&replica_id=n&fetch_offset=1&current_leader_epoch=1&last_fetched_epoch=1&high_watermark=1&max_bytes=1&max_wait_ms=99999999")
	f.Fuzz(func(t *testing.T, q string) {
		var a fasthttp.Args
		a.Parse(q)
		g, err := ParseFetch(&a)
		if err != nil {
			return
		}
		if g.Topic == "" || g.ReplicaID == "" || g.Partition < 0 || g.FetchOffset < 0 || g.CurrentLeaderEpoch < 0 || g.MaxBytes < 1 ||
			g.MaxWait < 0 || g.MaxWait > maxWait || g.LastFetchedEpoch < replicate.UndefinedEpoch {
			t.Fatalf("accepted %+v", g)
		}
	})
}
