package peer

import (
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/logagent/logagent/replicate"

	"github.com/logagent/logagent/wire"
)

// The peer API's replication requests (docs/api.md, "Peer API"). A follower
// asks with query parameters and the leader answers a fetch with raw batches
// in the body and the partition's positions in headers, so the body can go
// out with sendfile(2) untouched:
//
//	follower                                             leader
//	GET /v1/replica/fetch?topic=t&partition=0
//	    &replica_id=n2&fetch_offset=1200
//	    &current_leader_epoch=7&last_fetched_epoch=7
//	    &high_watermark=1100&max_bytes=8388608&max_wait_ms=500
//	    [&data_loss=1][&retiring=1]                              ──►
//	                                                 ◄──  200 OK
//	                                                      Logagent-Leader-Epoch: 7
//	                                                      Logagent-Epoch-Start-Offset: 1150
//	                                                      Logagent-High-Watermark: 1200
//	                                                      Logagent-Log-End-Offset: 1350
//	                                                      Logagent-Log-Start-Offset: 0
//	                                                      Content-Type: application/vnd.logagent.batch
//	                                                      Content-Length: 40960
//	                                                      <batches from the one holding 1200, whole,
//	                                                       at most max_bytes unless the first is bigger>
//
// data_loss=1 says the follower lost data it held (replicate.FetchRequest's
// DataLoss): the leader takes it out of the ISR. retiring=1 says the
// follower's agent is stopping: the leader hands no partition over to it.
// Logagent-Epoch-Start-Offset
// is where the leader's epoch starts, for the follower's ISR-join check.
// A follower whose log diverges gets no body and two more headers,
// Logagent-Diverging-Epoch and Logagent-Diverging-End-Offset (KIP-320). A
// caught-up fetch (fetch_offset at the leader's log end and high_watermark at
// the leader's) is held up to max_wait_ms until an append or a new high
// watermark. Refusals are the API's JSON errors: 409 fenced_leader_epoch or
// not_leader, 412 unknown_leader_epoch, 416 offset_out_of_range (with the
// leader's Logagent-Log-Start-Offset and Logagent-Log-End-Offset headers).
//
//	GET /v1/replica/epoch-end-offset?topic=t&partition=0&replica_id=n2
//	    &current_leader_epoch=7&epoch=5                          ──►
//	                                                 ◄──  200 {"epoch":5,"end_offset":1187}
const (
	FetchPath          = "/v1/replica/fetch"
	EpochEndOffsetPath = "/v1/replica/epoch-end-offset"
)

// Fetch is a follower's fetch as it travels.
type Fetch struct {
	Topic     string
	Partition int
	// TopicID is the incarnation of the topic the follower's replica holds
	// (election.TopicConfig.ID), which the leader's must be: epochs start
	// again when a topic is created again, so a replica of the deleted
	// incarnation whose agent has not seen the deletion yet fetches at
	// epochs the new one's leader accepts. Empty: not checked (a follower
	// of an earlier version, a session whose leader does not take it).
	TopicID string
	replicate.FetchRequest
	// KnownHighWatermark is the leader high watermark the follower last
	// saw: a held fetch also ends when the leader's passes it, so followers
	// learn of commits within one round trip.
	KnownHighWatermark int64
	MaxBytes           int64
	MaxWait            time.Duration
}

func (f Fetch) writeArgs(a *fasthttp.Args) {
	a.Set("topic", f.Topic)
	a.SetUint("partition", f.Partition)
	if f.TopicID != "" {
		a.Set("topic_id", f.TopicID)
	}
	a.Set("replica_id", f.ReplicaID)
	a.Set("fetch_offset", strconv.FormatInt(f.FetchOffset, 10))
	a.Set("current_leader_epoch", strconv.FormatInt(int64(f.CurrentLeaderEpoch), 10))
	a.Set("last_fetched_epoch", strconv.FormatInt(int64(f.LastFetchedEpoch), 10))
	a.Set("high_watermark", strconv.FormatInt(f.KnownHighWatermark, 10))
	a.Set("max_bytes", strconv.FormatInt(f.MaxBytes, 10))
	a.Set("max_wait_ms", strconv.FormatInt(f.MaxWait.Milliseconds(), 10))
	if f.DataLoss {
		a.Set("data_loss", "1")
	}
	if f.Retiring {
		a.Set("retiring", "1")
	}
}

// ParseFetch reads a follower's fetch from its query parameters.
func ParseFetch(a *fasthttp.Args) (Fetch, error) {
	p := argParser{args: a}
	f := Fetch{
		Topic:     p.str("topic"),
		Partition: int(p.int64("partition", 0, 1<<31-1)),
		FetchRequest: replicate.FetchRequest{
			ReplicaID:          p.str("replica_id"),
			FetchOffset:        p.int64("fetch_offset", 0, 1<<63-1),
			CurrentLeaderEpoch: int32(p.int64("current_leader_epoch", 0, 1<<31-1)),
			LastFetchedEpoch:   int32(p.int64("last_fetched_epoch", int64(replicate.UndefinedEpoch), 1<<31-1)),
			DataLoss:           string(a.Peek("data_loss")) == "1",
			Retiring:           string(a.Peek("retiring")) == "1",
		},
		KnownHighWatermark: p.int64("high_watermark", 0, 1<<63-1),
		MaxBytes:           p.int64("max_bytes", 1, 1<<31-1),
		MaxWait:            time.Duration(p.int64("max_wait_ms", 0, maxWait.Milliseconds())) * time.Millisecond,
		TopicID:            string(a.Peek("topic_id")),
	}
	if len(f.TopicID) > maxTopicIDLen && p.err == nil {
		p.err = fmt.Errorf("parameter topic_id of %d bytes, more than %d", len(f.TopicID), maxTopicIDLen)
	}
	return f, p.err
}

// maxWait bounds a held follower fetch whatever the follower asks.
const maxWait = wire.MaxReplicaFetchWait

// EpochQuery is a follower's epoch end offset request as it travels.
type EpochQuery struct {
	Topic     string
	Partition int
	replicate.EpochRequest
}

func (q EpochQuery) writeArgs(a *fasthttp.Args) {
	a.Set("topic", q.Topic)
	a.SetUint("partition", q.Partition)
	a.Set("replica_id", q.ReplicaID)
	a.Set("current_leader_epoch", strconv.FormatInt(int64(q.CurrentLeaderEpoch), 10))
	a.Set("epoch", strconv.FormatInt(int64(q.Epoch), 10))
}

// ParseEpochQuery reads a follower's epoch end offset request from its
// query parameters.
func ParseEpochQuery(a *fasthttp.Args) (EpochQuery, error) {
	p := argParser{args: a}
	q := EpochQuery{
		Topic:     p.str("topic"),
		Partition: int(p.int64("partition", 0, 1<<31-1)),
		EpochRequest: replicate.EpochRequest{
			ReplicaID:          p.str("replica_id"),
			CurrentLeaderEpoch: int32(p.int64("current_leader_epoch", 0, 1<<31-1)),
			Epoch:              int32(p.int64("epoch", 0, 1<<31-1)),
		},
	}
	return q, p.err
}

// EpochEndOffsetJSON is the body of an epoch end offset answer.
type EpochEndOffsetJSON struct {
	Epoch     int32 `json:"epoch"`
	EndOffset int64 `json:"end_offset"`
}

// FetchPositions are the headers of a fetch answer.
type FetchPositions struct {
	LeaderEpoch      int32
	EpochStartOffset int64
	HighWatermark    int64
	LogEndOffset     int64
	LogStartOffset   int64
	Diverging        *replicate.EpochEndOffset
}

// Write sets the positions as a fetch answer's headers.
func (p FetchPositions) Write(h *fasthttp.ResponseHeader) {
	h.Set(wire.HeaderLeaderEpoch, strconv.FormatInt(int64(p.LeaderEpoch), 10))
	h.Set(wire.HeaderEpochStartOffset, strconv.FormatInt(p.EpochStartOffset, 10))
	h.Set(wire.HeaderHighWatermark, strconv.FormatInt(p.HighWatermark, 10))
	h.Set(wire.HeaderLogEndOffset, strconv.FormatInt(p.LogEndOffset, 10))
	h.Set(wire.HeaderLogStartOffset, strconv.FormatInt(p.LogStartOffset, 10))
	if p.Diverging != nil {
		h.Set(wire.HeaderDivergingEpoch, strconv.FormatInt(int64(p.Diverging.Epoch), 10))
		h.Set(wire.HeaderDivergingEndOffset, strconv.FormatInt(p.Diverging.EndOffset, 10))
	}
}

func parseFetchPositions(h *fasthttp.ResponseHeader) (FetchPositions, error) {
	// The ranges of the session's answer frame (parseAnswerFrame): an
	// epoch of 2^32+7 is not epoch 7.
	p := headerParser{h: h}
	pos := FetchPositions{
		LeaderEpoch:      int32(p.int64(wire.HeaderLeaderEpoch, 0, math.MaxInt32)),
		EpochStartOffset: p.int64(wire.HeaderEpochStartOffset, 0, math.MaxInt64),
		HighWatermark:    p.int64(wire.HeaderHighWatermark, 0, math.MaxInt64),
		LogEndOffset:     p.int64(wire.HeaderLogEndOffset, 0, math.MaxInt64),
		LogStartOffset:   p.int64(wire.HeaderLogStartOffset, 0, math.MaxInt64),
	}
	if len(h.Peek(wire.HeaderDivergingEpoch)) > 0 {
		pos.Diverging = &replicate.EpochEndOffset{
			Epoch:     int32(p.int64(wire.HeaderDivergingEpoch, 0, math.MaxInt32)),
			EndOffset: p.int64(wire.HeaderDivergingEndOffset, 0, math.MaxInt64),
		}
	}
	return pos, p.err
}

// argParser reads required query parameters, keeping the first error.
type argParser struct {
	args *fasthttp.Args
	err  error
}

func (p *argParser) str(name string) string {
	v := string(p.args.Peek(name))
	if v == "" && p.err == nil {
		p.err = fmt.Errorf("missing parameter %s", name)
	}
	return v
}

func (p *argParser) int64(name string, lo, hi int64) int64 {
	s := p.str(name)
	if p.err != nil {
		return 0
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil || v < lo || v > hi {
		p.err = fmt.Errorf("parameter %s=%q is not an integer in [%d, %d]", name, s, lo, hi)
		return 0
	}
	return v
}

// headerParser reads required integer headers, keeping the first error.
type headerParser struct {
	h   *fasthttp.ResponseHeader
	err error
}

func (p *headerParser) int64(name string, lo, hi int64) int64 {
	s := string(p.h.Peek(name))
	v, err := strconv.ParseInt(s, 10, 64)
	if (err != nil || v < lo || v > hi) && p.err == nil {
		p.err = fmt.Errorf("header %s=%q is not an integer in [%d, %d]", name, s, lo, hi)
	}
	return v
}
