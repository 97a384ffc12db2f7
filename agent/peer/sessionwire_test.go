package peer

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/logagent/logagent/replicate"

	"github.com/logagent/logagent/wire"
)

func readOne(t *testing.T, b []byte, maxLen int) (byte, []byte) {
	t.Helper()
	typ, body, err := readFrame(bufio.NewReader(bytes.NewReader(b)), maxLen, nil)
	if err != nil {
		t.Fatalf("read frame: %v", err)
	}
	return typ, body
}

func TestSessionFrameRoundTrips(t *testing.T) {
	fetch := Fetch{
		Topic:     "orders.v2",
		Partition: 1<<31 - 1,
		FetchRequest: replicate.FetchRequest{
			ReplicaID:          "n-2",
			FetchOffset:        1 << 40,
			CurrentLeaderEpoch: 7,
			LastFetchedEpoch:   replicate.UndefinedEpoch,
		},
		KnownHighWatermark: 99,
		MaxBytes:           8 << 20,
	}
	for _, flags := range []struct{ dataLoss, retiring bool }{{false, false}, {true, false}, {false, true}, {true, true}} {
		fetch.DataLoss, fetch.Retiring = flags.dataLoss, flags.retiring
		typ, body := readOne(t, AppendFetchFrame(nil, 42, fetch), maxRequestFrame)
		id, got, err := parseFetchFrame(body, "n-2")
		if typ != frameFetch || err != nil || id != 42 || got != fetch {
			t.Fatalf("fetch round trip: type %d id %d %+v %v\nwant %+v", typ, id, got, err, fetch)
		}
	}

	typ, body := readOne(t, AppendForgetFrame(nil, "orders", 3), maxRequestFrame)
	if topic, p, err := parseForgetFrame(body); typ != frameForget || err != nil || topic != "orders" || p != 3 {
		t.Fatalf("forget round trip: %d %q %d %v", typ, topic, p, err)
	}
	if typ, body := readOne(t, AppendPingFrame(nil), maxRequestFrame); typ != framePing || len(body) != 0 {
		t.Fatalf("ping round trip: %d %q", typ, body)
	}

	batches := bytes.Repeat([]byte("b"), 1000)
	for _, pos := range []FetchPositions{
		{LeaderEpoch: 3, EpochStartOffset: 5, HighWatermark: 10, LogEndOffset: 12, LogStartOffset: 2},
		{LeaderEpoch: 3, HighWatermark: 10, LogEndOffset: 12, Diverging: &replicate.EpochEndOffset{Epoch: 1, EndOffset: 7}},
	} {
		want := batches
		if pos.Diverging != nil {
			want = nil
		}
		frame := append(AppendAnswerHeader(nil, 9, pos, int64(len(want))), want...)
		typ, body := readOne(t, frame, 1<<20)
		id, got, gotBatches, err := parseAnswerFrame(body)
		if typ != frameAnswer || err != nil || id != 9 || !bytes.Equal(gotBatches, want) ||
			got.LeaderEpoch != pos.LeaderEpoch || got.EpochStartOffset != pos.EpochStartOffset || got.HighWatermark != pos.HighWatermark ||
			got.LogEndOffset != pos.LogEndOffset || got.LogStartOffset != pos.LogStartOffset ||
			(got.Diverging == nil) != (pos.Diverging == nil) || (pos.Diverging != nil && *got.Diverging != *pos.Diverging) {
			t.Fatalf("answer round trip of %+v: type %d id %d %+v %d bytes %v", pos, typ, id, got, len(gotBatches), err)
		}
	}

	refusal := &Error{Status: 416, Code: "offset_out_of_range", Message: "out", LogStartOffset: 4, LogEndOffset: 9}
	typ, body = readOne(t, AppendRefusalFrame(nil, 5, refusal), maxRequestFrame)
	if id, got, err := parseRefusalFrame(body); typ != frameRefusal || err != nil || id != 5 || *got != *refusal {
		t.Fatalf("refusal round trip: %d %d %+v %v", typ, id, got, err)
	}

	leading := Leading{Topic: "orders.v2", Partition: 1<<31 - 1, Epoch: 1<<31 - 1, Leader: "n-3"}
	typ, body = readOne(t, AppendLeadingFrame(nil, leading), maxRequestFrame)
	if got, err := parseLeadingFrame(body); typ != frameLeading || err != nil || got != leading {
		t.Fatalf("leading round trip: %d %+v %v", typ, got, err)
	}
}

// TestSessionFramesRefused: a length past the reader's bound is refused
// before anything is allocated for it, and bodies that are short, too
// long, or out of range fail to parse.
func TestSessionFramesRefused(t *testing.T) {
	huge := binary.BigEndian.AppendUint32(nil, 1<<31)
	huge = append(huge, frameAnswer)
	if _, _, err := readFrame(bufio.NewReader(bytes.NewReader(huge)), 1<<20, nil); !errors.Is(err, ErrBadFrame) {
		t.Errorf("frame of 2 GiB: %v", err)
	}
	zero := binary.BigEndian.AppendUint32(nil, 0)
	if _, _, err := readFrame(bufio.NewReader(bytes.NewReader(append(zero, 0))), 1<<20, nil); !errors.Is(err, ErrBadFrame) {
		t.Errorf("frame of length 0: %v", err)
	}
	cut := AppendPingFrame(nil)[:3]
	if _, _, err := readFrame(bufio.NewReader(bytes.NewReader(cut)), 1<<20, nil); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("cut header: %v", err)
	}
	short := AppendForgetFrame(nil, "orders", 1)
	if _, _, err := readFrame(bufio.NewReader(bytes.NewReader(short[:len(short)-2])), 1<<20, nil); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("cut body: %v", err)
	}

	good := Fetch{Topic: "t", FetchRequest: replicate.FetchRequest{CurrentLeaderEpoch: 1}, MaxBytes: 1}
	body := func(f Fetch) []byte { return AppendFetchFrame(nil, 1, f)[frameHeaderLen:] }
	setU32 := func(b []byte, at int, v uint32) []byte {
		b = bytes.Clone(b)
		binary.BigEndian.PutUint32(b[at:], v)
		return b
	}
	g := body(good)
	for name, b := range map[string][]byte{
		"short":                g[:len(g)-1],
		"trailing byte":        append(bytes.Clone(g), 0),
		"partition past int32": setU32(g, 4, 1<<31),
		"negative offset":      setU32(g, 8, 1<<31),
		"negative epoch":       setU32(g, 16, 1<<31),
		"last epoch below -1":  setU32(g, 20, 0xfffffffe),
		"max bytes 0":          setU32(g, 32, 0),
		"max bytes past int32": setU32(g, 32, 1<<31),
		"unknown flag":         func() []byte { b := bytes.Clone(g); b[36] = 4; return b }(),
		"empty topic":          body(Fetch{FetchRequest: replicate.FetchRequest{CurrentLeaderEpoch: 1}, MaxBytes: 1}),
		"topic past its bound": body(Fetch{Topic: strings.Repeat("t", maxTopicLen+1), MaxBytes: 1}),
	} {
		if _, _, err := parseFetchFrame(b, "n2"); !errors.Is(err, ErrBadFrame) {
			t.Errorf("fetch %s: %v", name, err)
		}
	}
	if _, _, err := parseFetchFrame(g, "n2"); err != nil {
		t.Fatalf("the good fetch: %v", err)
	}

	a := AppendAnswerHeader(nil, 1, FetchPositions{LeaderEpoch: 1}, 0)[frameHeaderLen:]
	for name, b := range map[string][]byte{
		"short":                  a[:len(a)-1],
		"diverging flag 2":       func() []byte { b := bytes.Clone(a); b[len(b)-1] = 2; return b }(),
		"negative position":      setU32(a, 8, 1<<31),
		"diverging with batches": append(AppendAnswerHeader(nil, 1, FetchPositions{Diverging: &replicate.EpochEndOffset{}}, 1)[frameHeaderLen:], 'x'),
	} {
		if _, _, _, err := parseAnswerFrame(b); !errors.Is(err, ErrBadFrame) {
			t.Errorf("answer %s: %v", name, err)
		}
	}
	r := AppendRefusalFrame(nil, 1, &Error{Status: 409, Code: "not_leader"})[frameHeaderLen:]
	for name, b := range map[string][]byte{
		"short":    r[:len(r)-1],
		"trailing": append(bytes.Clone(r), 0),
		"no code":  AppendRefusalFrame(nil, 1, &Error{Status: 409})[frameHeaderLen:],
	} {
		if _, _, err := parseRefusalFrame(b); !errors.Is(err, ErrBadFrame) {
			t.Errorf("refusal %s: %v", name, err)
		}
	}
	l := AppendLeadingFrame(nil, Leading{Topic: "t", Epoch: 1, Leader: "n1"})[frameHeaderLen:]
	for name, b := range map[string][]byte{
		"short":                l[:len(l)-1],
		"trailing":             append(bytes.Clone(l), 0),
		"negative epoch":       setU32(l, 0, 1<<31),
		"partition past int32": setU32(l, 4, 1<<31),
		"empty topic":          AppendLeadingFrame(nil, Leading{Epoch: 1, Leader: "n1"})[frameHeaderLen:],
		"no leader":            AppendLeadingFrame(nil, Leading{Topic: "t", Epoch: 1})[frameHeaderLen:],
	} {
		if _, err := parseLeadingFrame(b); !errors.Is(err, ErrBadFrame) {
			t.Errorf("leading %s: %v", name, err)
		}
	}
	f := AppendForgetFrame(nil, "t", 0)[frameHeaderLen:]
	for name, b := range map[string][]byte{
		"short":       f[:len(f)-1],
		"empty topic": AppendForgetFrame(nil, "", 0)[frameHeaderLen:],
	} {
		if _, _, err := parseForgetFrame(b); !errors.Is(err, ErrBadFrame) {
			t.Errorf("forget %s: %v", name, err)
		}
	}
}

func TestReadSessionRequest(t *testing.T) {
	f := Fetch{Topic: "t", Partition: 2, FetchRequest: replicate.FetchRequest{ReplicaID: "n2", CurrentLeaderEpoch: 1}, MaxBytes: 1}
	var b []byte
	b = AppendFetchFrame(b, 7, f)
	b = AppendForgetFrame(b, "t", 2)
	b = AppendPingFrame(b)
	b = AppendAnswerHeader(b, 1, FetchPositions{}, 0) // a leader's frame
	r := bufio.NewReader(bytes.NewReader(b))
	var buf []byte
	want := []SessionRequest{
		{Kind: SessionFetch, ID: 7, Fetch: f},
		{Kind: SessionForget, Fetch: Fetch{Topic: "t", Partition: 2, FetchRequest: replicate.FetchRequest{ReplicaID: "n2"}}},
		{Kind: SessionPing},
	}
	for i, w := range want {
		var got SessionRequest
		var err error
		got, buf, err = ReadSessionRequest(r, buf, "n2")
		if err != nil || got != w {
			t.Fatalf("frame %d: %+v %v, want %+v", i, got, err, w)
		}
	}
	if _, _, err := ReadSessionRequest(r, buf, "n2"); !errors.Is(err, ErrBadFrame) {
		t.Fatalf("an answer frame from a follower: %v", err)
	}
	if _, _, err := ReadSessionRequest(r, buf, "n2"); !errors.Is(err, io.EOF) {
		t.Fatalf("after the last frame: %v", err)
	}
}

// TestRefusalFrameNegativeBounds: a refusal frame whose log bounds are
// negative is malformed (a leader's log offsets never are), as an answer
// frame's negative positions are: an offset_out_of_range refusal of
// [-1, -5) had the follower ask its log to cut at -5, and fail it.
func TestRefusalFrameNegativeBounds(t *testing.T) {
	frame := AppendRefusalFrame(nil, 1, &Error{Status: 416, Code: wire.CodeOffsetOutOfRange, LogStartOffset: -1, LogEndOffset: -5})
	_, e, err := parseRefusalFrame(frame[frameHeaderLen:])
	if !errors.Is(err, ErrBadFrame) {
		t.Fatalf("refusal with log bounds [-1, -5) parsed: %+v, %v", e, err)
	}
}

// TestFetchFrameTopicID: a fetch frame carries a topic id behind flag 4,
// and one that sets the flag with an empty id is refused.
func TestFetchFrameTopicID(t *testing.T) {
	f := Fetch{Topic: "orders", Partition: 3, TopicID: "0123456789abcdef0123456789abcdef",
		FetchRequest: replicate.FetchRequest{ReplicaID: "n2", FetchOffset: 7, CurrentLeaderEpoch: 2, LastFetchedEpoch: 2}, MaxBytes: 1 << 20}
	for _, tc := range []struct {
		name    string
		topicID string
	}{{"with a topic id", f.TopicID}, {"without", ""}} {
		g := f
		g.TopicID = tc.topicID
		frame := AppendFetchFrame(nil, 9, g)
		id, got, err := parseFetchFrame(frame[frameHeaderLen:], "n2")
		if err != nil || id != 9 || got.TopicID != tc.topicID || got.Topic != "orders" || got.FetchOffset != 7 {
			t.Errorf("%s: parsed %d %+v, %v", tc.name, id, got, err)
		}
	}
	// The flag with an empty id: the id's length is a zero u16.
	g := f
	g.TopicID = ""
	frame := AppendFetchFrame(nil, 9, g)
	frame[frameHeaderLen+4+4+8+4+4+8+4] |= flagTopicID
	frame = binary.BigEndian.AppendUint16(frame, 0)
	binary.BigEndian.PutUint32(frame, uint32(len(frame)-4))
	if _, _, err := parseFetchFrame(frame[frameHeaderLen:], "n2"); !errors.Is(err, ErrBadFrame) {
		t.Errorf("a topic id flag with an empty id: %v, want ErrBadFrame", err)
	}
}
