package peer

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"

	"github.com/logagent/logagent/replicate"
)

// The fetch session (docs/design.md §7.9): one connection from a follower
// agent to a leader agent carries the fetches of every partition the one
// follows on the other. The follower opens it with a GET that the leader
// answers 200 and then takes the connection over (fasthttp's Hijack); from
// then on both sides write frames, and neither waits for the other:
//
//	follower                                             leader
//	GET /v1/replica/session?replica_id=n2&heartbeat_ms=500&leading=1
//	    Authorization: Bearer <peer token>                   ──►
//	                                                 ◄──  200 OK
//	                                                      Logagent-Session: 1
//	                                                      Content-Length: 0
//	fetch  id=1 orders/0 fetch_offset=1200 epoch=7 …        ──►   (parked: at the log end)
//	fetch  id=2 orders/1 fetch_offset=0 …                   ──►
//	                                                 ◄──  answer id=2 positions + batches
//	fetch  id=3 orders/1 fetch_offset=4096 …                ──►
//	ping                                                    ──►   (nothing else sent for heartbeat_ms)
//	                                                 ◄──  ping
//	                                                 ◄──  answer id=1 …   (orders/0 appended)
//	                                                 ◄──  leading orders/2 epoch=8 leader=n1
//
// A follower sends a partition's fetch only when the partition is new to
// the session or its last fetch was answered (its position changed): a
// parked fetch stays at the leader, which answers it when the partition has
// something (records, a high watermark past the follower's, a diverging
// epoch, a refusal), so an idle partition costs nothing per round on either
// side. A later fetch of the same partition replaces the earlier; forget
// drops it. Every frame is
//
//	length u32 (of what follows, bounded by the reader) | type u8 | body
//
// with integers big-endian, and these bodies:
//
//	fetch   1  id u32 | partition u32 | fetch_offset i64 | current_leader_epoch i32 |
//	           last_fetched_epoch i32 | high_watermark i64 | max_bytes u32 |
//	           flags u8 (1 data_loss, 2 retiring, 4 topic id) | topic_len u16 | topic
//	           [| topic_id_len u16 | topic_id]   (with flag 4)
//	forget  2  partition u32 | topic_len u16 | topic
//	ping    3  (empty)
//	answer  4  id u32 | leader_epoch i32 | epoch_start_offset i64 | high_watermark i64 |
//	           log_end_offset i64 | log_start_offset i64 | diverging u8 (0 or 1)
//	           [| diverging_epoch i32 | diverging_end_offset i64] | batches (the rest)
//	refusal 5  id u32 | status u16 | log_start_offset i64 | log_end_offset i64 |
//	           code_len u16 | code | message_len u16 | message
//	leading 6  epoch i32 | partition u32 | topic_len u16 | topic | leader_len u16 | leader
//
// An answer is one partition's, batches at most the fetch's max_bytes
// unless the first batch is bigger, as a GET /v1/replica/fetch answer, and
// its batches go out with sendfile(2) on a plain TCP connection; the
// reader refuses a frame longer than its bound before reading it. A
// refusal carries the peer API's status and code (409 not_leader, 416
// offset_out_of_range with the leader's log bounds, …), so the follower
// handles it as it handles a refused GET.
//
// A fetch carries its replica's topic id (flag 4) only on a session whose
// leader said it takes them (topic_ids=1 in the request, answered with
// Logagent-Topic-Ids: 1): an earlier leader refuses a frame with a flag it
// does not know. A leader refuses a fetch whose topic id is not its
// replica's with 409 inconsistent_topic_id.
//
// A leading frame is the leader agent's own word that it has just won the
// partition's election at that epoch, sent on every session that asked for
// them (leading=1; an older follower does not, and would take the frame
// type for a broken session) from an agent holding one of the partition's
// replicas: the follower starts following it at once instead of waiting
// for Consul's metadata watch to say so, seconds later when thousands of
// partitions change leader at once (docs/design.md §7.9). It carries no
// authority the leader's epoch fencing does not already check: a fetch at
// an epoch the agent no longer leads is refused.
const (
	SessionPath = "/v1/replica/session"
	// HeaderSession marks the leader's 200 to a session request, so that
	// nothing else answering 200 passes for a session.
	HeaderSession = "Logagent-Session"
)

// Frame types.
const (
	frameFetch   byte = 1
	frameForget  byte = 2
	framePing    byte = 3
	frameAnswer  byte = 4
	frameRefusal byte = 5
	frameLeading byte = 6
)

// LeadingParam is the session request's query parameter that asks for
// leading frames.
const LeadingParam = "leading"

// TopicIDsParam is the session request's query parameter that offers
// fetch frames with topic ids, and HeaderTopicIDs the leader's answer
// that takes them.
const (
	TopicIDsParam  = "topic_ids"
	HeaderTopicIDs = "Logagent-Topic-Ids"
)

const (
	// frameHeaderLen is the length and type in front of every body.
	frameHeaderLen = 5
	// maxTopicLen bounds a topic name in a frame; election's rules keep
	// names far shorter.
	maxTopicLen = 1024
	// maxTopicIDLen bounds a topic id (election's are 32 hex digits).
	maxTopicIDLen = 64
	// maxRequestFrame bounds the frames a follower sends.
	maxRequestFrame = 64 + maxTopicLen + 2 + maxTopicIDLen
	// maxRefusalText bounds a refusal's code and message.
	maxRefusalText = 1024
	// answerHeaderLen is an answer's fixed part with a diverging epoch.
	answerHeaderLen = 4 + 4 + 8*4 + 1 + 4 + 8

	flagDataLoss byte = 1
	flagRetiring byte = 2
	flagTopicID  byte = 4
)

// ErrBadFrame refuses a session frame that does not parse.
var ErrBadFrame = errors.New("agent: bad fetch session frame")

func badFrame(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrBadFrame, fmt.Sprintf(format, args...))
}

// appendFrameHeader starts a frame of type typ whose body is n bytes.
func appendFrameHeader(b []byte, typ byte, n int) []byte {
	b = binary.BigEndian.AppendUint32(b, uint32(1+n))
	return append(b, typ)
}

// appendStr appends a string as the frames hold one: its length in a u16,
// then its bytes.
func appendStr(b []byte, s string) []byte {
	b = binary.BigEndian.AppendUint16(b, uint16(len(s)))
	return append(b, s...)
}

// AppendFetchFrame appends the fetch frame of f under id. The replica id
// and the wait are the session's.
func AppendFetchFrame(b []byte, id uint32, f Fetch) []byte {
	size := 4 + 4 + 8 + 4 + 4 + 8 + 4 + 1 + 2 + len(f.Topic)
	if f.TopicID != "" {
		size += 2 + len(f.TopicID)
	}
	b = appendFrameHeader(b, frameFetch, size)
	b = binary.BigEndian.AppendUint32(b, id)
	b = binary.BigEndian.AppendUint32(b, uint32(f.Partition))
	b = binary.BigEndian.AppendUint64(b, uint64(f.FetchOffset))
	b = binary.BigEndian.AppendUint32(b, uint32(f.CurrentLeaderEpoch))
	b = binary.BigEndian.AppendUint32(b, uint32(f.LastFetchedEpoch))
	b = binary.BigEndian.AppendUint64(b, uint64(f.KnownHighWatermark))
	b = binary.BigEndian.AppendUint32(b, uint32(min(f.MaxBytes, math.MaxInt32)))
	var flags byte
	if f.DataLoss {
		flags |= flagDataLoss
	}
	if f.Retiring {
		flags |= flagRetiring
	}
	if f.TopicID != "" {
		flags |= flagTopicID
	}
	b = append(b, flags)
	b = appendStr(b, f.Topic)
	if f.TopicID != "" {
		b = appendStr(b, f.TopicID)
	}
	return b
}

// AppendForgetFrame appends the frame that drops a partition's fetch.
func AppendForgetFrame(b []byte, topic string, partition int) []byte {
	b = appendFrameHeader(b, frameForget, 4+2+len(topic))
	b = binary.BigEndian.AppendUint32(b, uint32(partition))
	return appendStr(b, topic)
}

// AppendPingFrame appends a heartbeat.
func AppendPingFrame(b []byte) []byte { return appendFrameHeader(b, framePing, 0) }

// AppendAnswerHeader appends an answer frame up to its batches, which the
// caller writes next: batchesLen bytes of them.
func AppendAnswerHeader(b []byte, id uint32, pos FetchPositions, batchesLen int64) []byte {
	n := answerHeaderLen - 12
	if pos.Diverging != nil {
		n += 12
	}
	b = appendFrameHeader(b, frameAnswer, n+int(batchesLen))
	b = binary.BigEndian.AppendUint32(b, id)
	b = binary.BigEndian.AppendUint32(b, uint32(pos.LeaderEpoch))
	b = binary.BigEndian.AppendUint64(b, uint64(pos.EpochStartOffset))
	b = binary.BigEndian.AppendUint64(b, uint64(pos.HighWatermark))
	b = binary.BigEndian.AppendUint64(b, uint64(pos.LogEndOffset))
	b = binary.BigEndian.AppendUint64(b, uint64(pos.LogStartOffset))
	if pos.Diverging == nil {
		return append(b, 0)
	}
	b = append(b, 1)
	b = binary.BigEndian.AppendUint32(b, uint32(pos.Diverging.Epoch))
	return binary.BigEndian.AppendUint64(b, uint64(pos.Diverging.EndOffset))
}

// AppendRefusalFrame appends the refusal of fetch id.
func AppendRefusalFrame(b []byte, id uint32, e *Error) []byte {
	code, msg := clip(e.Code, maxRefusalText), clip(e.Message, maxRefusalText)
	b = appendFrameHeader(b, frameRefusal, 4+2+8+8+2+len(code)+2+len(msg))
	b = binary.BigEndian.AppendUint32(b, id)
	b = binary.BigEndian.AppendUint16(b, uint16(e.Status))
	b = binary.BigEndian.AppendUint64(b, uint64(e.LogStartOffset))
	b = binary.BigEndian.AppendUint64(b, uint64(e.LogEndOffset))
	b = appendStr(b, code)
	return appendStr(b, msg)
}

// Leading is a leading frame: Leader, the agent that sent it, leads the
// partition at Epoch.
type Leading struct {
	Topic     string
	Partition int
	Epoch     int32
	Leader    string
}

// AppendLeadingFrame appends the frame that announces l.
func AppendLeadingFrame(b []byte, l Leading) []byte {
	b = appendFrameHeader(b, frameLeading, 4+4+2+len(l.Topic)+2+len(l.Leader))
	b = binary.BigEndian.AppendUint32(b, uint32(l.Epoch))
	b = binary.BigEndian.AppendUint32(b, uint32(l.Partition))
	b = appendStr(b, l.Topic)
	return appendStr(b, l.Leader)
}

// parseLeadingFrame reads a leading frame's body.
func parseLeadingFrame(body []byte) (Leading, error) {
	r := frameReader{b: body}
	epoch := int32(r.u32())
	partition := r.u32()
	l := Leading{Epoch: epoch, Topic: r.str(maxTopicLen), Leader: r.str(maxTopicLen)}
	if err := r.done(); err != nil {
		return Leading{}, err
	}
	if epoch < 0 || partition > math.MaxInt32 || l.Topic == "" || l.Leader == "" {
		return Leading{}, badFrame("leading %q/%d epoch %d leader %q", l.Topic, partition, epoch, l.Leader)
	}
	l.Partition = int(partition)
	return l, nil
}

func clip(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}

// readFrame reads the next frame into buf (grown as needed) and returns its
// type and body; a frame longer than maxLen is refused before its body is
// read, and the connection is then unusable.
func readFrame(r *bufio.Reader, maxLen int, buf []byte) (byte, []byte, error) {
	var hdr [frameHeaderLen]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return 0, buf, err
	}
	n := int64(binary.BigEndian.Uint32(hdr[:4]))
	if n < 1 || n-1 > int64(maxLen) {
		return 0, buf, badFrame("frame of %d bytes, at most %d", n-1, maxLen)
	}
	n--
	if int64(cap(buf)) < n {
		buf = make([]byte, n)
	}
	buf = buf[:n]
	if _, err := io.ReadFull(r, buf); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return 0, buf, err
	}
	return hdr[4], buf, nil
}

// frameReader takes a body apart, keeping the first error.
type frameReader struct {
	b   []byte
	err error
}

func (r *frameReader) take(n int) []byte {
	if r.err != nil {
		return nil
	}
	if len(r.b) < n {
		r.err = badFrame("body ends %d bytes short", n-len(r.b))
		return nil
	}
	v := r.b[:n]
	r.b = r.b[n:]
	return v
}

func (r *frameReader) u8() byte {
	if v := r.take(1); v != nil {
		return v[0]
	}
	return 0
}

func (r *frameReader) u16() uint16 {
	if v := r.take(2); v != nil {
		return binary.BigEndian.Uint16(v)
	}
	return 0
}

func (r *frameReader) u32() uint32 {
	if v := r.take(4); v != nil {
		return binary.BigEndian.Uint32(v)
	}
	return 0
}

func (r *frameReader) i64() int64 {
	if v := r.take(8); v != nil {
		return int64(binary.BigEndian.Uint64(v))
	}
	return 0
}

func (r *frameReader) str(max int) string {
	n := int(r.u16())
	if r.err == nil && n > max {
		r.err = badFrame("string of %d bytes, at most %d", n, max)
	}
	return string(r.take(n))
}

// done fails a body with bytes left after its last field.
func (r *frameReader) done() error {
	if r.err == nil && len(r.b) > 0 {
		r.err = badFrame("%d bytes after the last field", len(r.b))
	}
	return r.err
}

// parseFetchFrame reads a fetch frame's body for the session's replica.
func parseFetchFrame(body []byte, replicaID string) (uint32, Fetch, error) {
	r := frameReader{b: body}
	id := r.u32()
	partition := r.u32()
	f := Fetch{FetchRequest: replicate.FetchRequest{ReplicaID: replicaID}}
	f.FetchOffset = r.i64()
	f.CurrentLeaderEpoch = int32(r.u32())
	f.LastFetchedEpoch = int32(r.u32())
	f.KnownHighWatermark = r.i64()
	maxBytes := r.u32()
	flags := r.u8()
	f.Topic = r.str(maxTopicLen)
	if flags&flagTopicID != 0 {
		if f.TopicID = r.str(maxTopicIDLen); f.TopicID == "" && r.err == nil {
			r.err = badFrame("an empty topic id")
		}
	}
	if err := r.done(); err != nil {
		return 0, Fetch{}, err
	}
	switch {
	case partition > math.MaxInt32:
		return 0, Fetch{}, badFrame("partition %d", partition)
	case f.FetchOffset < 0, f.KnownHighWatermark < 0:
		return 0, Fetch{}, badFrame("negative offset (fetch %d, high watermark %d)", f.FetchOffset, f.KnownHighWatermark)
	case f.CurrentLeaderEpoch < 0, f.LastFetchedEpoch < replicate.UndefinedEpoch:
		return 0, Fetch{}, badFrame("epochs %d, last fetched %d", f.CurrentLeaderEpoch, f.LastFetchedEpoch)
	case maxBytes < 1 || maxBytes > math.MaxInt32:
		return 0, Fetch{}, badFrame("max bytes %d", maxBytes)
	case flags&^(flagDataLoss|flagRetiring|flagTopicID) != 0:
		return 0, Fetch{}, badFrame("flags %#x", flags)
	case f.Topic == "":
		return 0, Fetch{}, badFrame("empty topic")
	}
	f.Partition, f.MaxBytes = int(partition), int64(maxBytes)
	f.DataLoss, f.Retiring = flags&flagDataLoss != 0, flags&flagRetiring != 0
	return id, f, nil
}

// parseForgetFrame reads a forget frame's body.
func parseForgetFrame(body []byte) (string, int, error) {
	r := frameReader{b: body}
	partition := r.u32()
	topic := r.str(maxTopicLen)
	if err := r.done(); err != nil {
		return "", 0, err
	}
	if partition > math.MaxInt32 || topic == "" {
		return "", 0, badFrame("forget %q/%d", topic, partition)
	}
	return topic, int(partition), nil
}

// parseAnswerFrame reads an answer frame's body; the batches alias body.
func parseAnswerFrame(body []byte) (uint32, FetchPositions, []byte, error) {
	r := frameReader{b: body}
	id := r.u32()
	pos := FetchPositions{
		LeaderEpoch:      int32(r.u32()),
		EpochStartOffset: r.i64(),
		HighWatermark:    r.i64(),
		LogEndOffset:     r.i64(),
		LogStartOffset:   r.i64(),
	}
	switch diverging := r.u8(); {
	case r.err != nil:
	case diverging == 1:
		pos.Diverging = &replicate.EpochEndOffset{Epoch: int32(r.u32()), EndOffset: r.i64()}
	case diverging != 0:
		r.err = badFrame("diverging flag %d", diverging)
	}
	if r.err != nil {
		return 0, FetchPositions{}, nil, r.err
	}
	if pos.LeaderEpoch < 0 || pos.HighWatermark < 0 || pos.LogEndOffset < 0 || pos.LogStartOffset < 0 || pos.EpochStartOffset < 0 {
		return 0, FetchPositions{}, nil, badFrame("negative position in %+v", pos)
	}
	if pos.Diverging != nil && len(r.b) > 0 {
		return 0, FetchPositions{}, nil, badFrame("diverging answer with %d bytes of batches", len(r.b))
	}
	return id, pos, r.b, nil
}

// parseRefusalFrame reads a refusal frame's body.
func parseRefusalFrame(body []byte) (uint32, *Error, error) {
	r := frameReader{b: body}
	id := r.u32()
	e := &Error{Status: int(r.u16()), LogStartOffset: r.i64(), LogEndOffset: r.i64()}
	e.Code = r.str(maxRefusalText)
	e.Message = r.str(maxRefusalText)
	if err := r.done(); err != nil {
		return 0, nil, err
	}
	if e.Code == "" {
		return 0, nil, badFrame("refusal without a code")
	}
	if e.LogStartOffset < 0 || e.LogEndOffset < 0 {
		return 0, nil, badFrame("refusal with log bounds [%d, %d)", e.LogStartOffset, e.LogEndOffset)
	}
	return id, e, nil
}

// SessionRequest is a frame a follower sent on its session: a fetch
// (Fetch, under ID), a forget of Fetch.Topic and Fetch.Partition, or a
// ping.
type SessionRequest struct {
	Kind  SessionRequestKind
	ID    uint32
	Fetch Fetch
}

// SessionRequestKind tells the frames of a follower apart.
type SessionRequestKind uint8

const (
	SessionFetch SessionRequestKind = iota + 1
	SessionForget
	SessionPing
)

// ReadSessionRequest reads the next frame of the follower replicaID's
// session, reusing buf; any error leaves the connection unusable.
func ReadSessionRequest(r *bufio.Reader, buf []byte, replicaID string) (SessionRequest, []byte, error) {
	typ, body, err := readFrame(r, maxRequestFrame, buf)
	if err != nil {
		return SessionRequest{}, body, err
	}
	var req SessionRequest
	switch typ {
	case frameFetch:
		req.Kind = SessionFetch
		req.ID, req.Fetch, err = parseFetchFrame(body, replicaID)
	case frameForget:
		req.Kind = SessionForget
		req.Fetch.ReplicaID = replicaID
		req.Fetch.Topic, req.Fetch.Partition, err = parseForgetFrame(body)
	case framePing:
		req.Kind = SessionPing
		if len(body) > 0 {
			err = badFrame("ping with %d bytes", len(body))
		}
	default:
		err = badFrame("frame type %d from a follower", typ)
	}
	return req, body, err
}
