package agent

import (
	"fmt"
	"math"
	"mime"
	"strconv"
	"strings"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/logagent/logagent/agent/kafkabroker"
	"github.com/logagent/logagent/agent/partition"
	"github.com/logagent/logagent/agent/reply"
	"github.com/logagent/logagent/replicate"
	"github.com/logagent/logagent/segstore"

	"github.com/logagent/logagent/wire"
)

// Bounds of a consumer fetch.
const (
	defaultFetchMaxBytes = 1 << 20
	maxClientWait        = wire.MaxClientWait
)

// handleFetch serves GET /v1/topics/{topic}/partitions/{partition}/records:
// whole batches from the local replica, below its high watermark, sent with
// sendfile. A leader, or a follower in the ISR, serves; other agents proxy
// the fetch to the leader, or answer not_leader when they cannot.
func (a *Agent) handleFetch(ctx *fasthttp.RequestCtx) {
	start := a.now()
	defer func() { a.metrics.ObserveFetch(a.now().Sub(start)) }()
	if !a.serving(ctx) {
		return
	}
	format, ok := fetchFormat(ctx.Request.Header.Peek(fasthttp.HeaderAccept))
	if !ok {
		reply.WriteError(ctx, fasthttp.StatusNotAcceptable, wire.CodeNotAcceptable, "records are served as "+wire.ContentTypeBatch+" or "+wire.ContentTypeNDJSON, false)
		return
	}
	topic, partition, err := a.partitionParams(ctx)
	if err != nil {
		writeErr(ctx, err)
		return
	}
	args := ctx.QueryArgs()
	if args.Has("group") && !a.groupFetch(ctx, topic, partition) {
		return
	}
	maxBytes, err := intParam(args, "max_bytes", defaultFetchMaxBytes, 1, 1<<31-1)
	if err != nil {
		writeErr(ctx, err)
		return
	}
	if format == wire.ContentTypeNDJSON {
		// Decoded in memory, and written out again as JSON: a max_bytes of
		// 2 GiB had one request read up to a whole segment.
		maxBytes = min(maxBytes, int64(a.recordLimits.MaxBatchBytes))
	}
	wait, err := durationParam(args, "wait", 0, maxClientWait)
	if err != nil {
		writeErr(ctx, err)
		return
	}
	// Read before the replica is chosen: a malformed offset is a bad
	// request wherever the partition is served (it was answered not_leader
	// or leader_not_available, retriable, by an agent that had no leader to
	// proxy it to).
	at, err := parseOffset(args)
	if err != nil {
		writeErr(ctx, err)
		return
	}
	lastFetchedEpoch, err := intParam(args, "last_fetched_epoch", -1, -1, math.MaxInt32)
	if err != nil {
		writeErr(ctx, err)
		return
	}
	r, refusal := a.fetchReplica(topic, partition)
	if refusal != nil {
		if !a.proxyFetch(ctx, topic, partition, wait, maxBytes) {
			reply.WriteAPIError(ctx, refusal)
		}
		return
	}
	offset := resolveOffset(at, r.CurrentLog())
	region, pos, apiErr := a.readLocal(r, offset, int32(lastFetchedEpoch), maxBytes, wait)
	if apiErr != nil {
		reply.WriteAPIError(ctx, apiErr)
		return
	}
	hw, lso := pos.HW, pos.LSO
	h := &ctx.Response.Header
	h.Set(wire.HeaderHighWatermark, strconv.FormatInt(hw, 10))
	h.Set(wire.HeaderLogStartOffset, strconv.FormatInt(lso, 10))
	if d := pos.Diverging; d != nil {
		h.Set(wire.HeaderDivergingEpoch, strconv.FormatInt(int64(d.Epoch), 10))
		h.Set(wire.HeaderDivergingEndOffset, strconv.FormatInt(d.EndOffset, 10))
		ctx.SetContentType(format)
		ctx.SetStatusCode(fasthttp.StatusOK)
		return
	}
	if format == wire.ContentTypeNDJSON {
		if err := a.writeNDJSON(ctx, region, offset, maxBytes); err != nil {
			reply.WriteError(ctx, fasthttp.StatusInternalServerError, wire.CodeStorageError, err.Error(), false)
			return
		}
		a.metrics.Fetched(topic, int64(len(ctx.Response.Body())))
		return
	}
	ctx.SetContentType(wire.ContentTypeBatch)
	ctx.SetStatusCode(fasthttp.StatusOK)
	a.metrics.Fetched(topic, region.Len)
	reply.SendRegion(ctx, region)
}

// fetchReplica is the serving decision of a consumer fetch, the HTTP
// API's and Kafka's: the local replica when it leads the partition or
// follows it in the ISR with its whole log, else the error to answer when
// the fetch cannot go to the leader instead.
func (a *Agent) fetchReplica(topic string, partition int) (*partition.Replica, *reply.APIError) {
	r := a.replicas.Get(topic, partition)
	if r == nil {
		return nil, a.notLeaderError(topic, partition, "this agent has no replica of "+reply.PartitionName(topic, partition))
	}
	if v := r.CurrentView(); v.DataLoss || !(v.Role == roleLeader || (v.Role == roleFollower && v.InSync(a.cfg.NodeID))) {
		return nil, a.notLeaderError(topic, partition, "this agent's replica of "+reply.PartitionName(topic, partition)+" is not in sync")
	}
	return r, nil
}

// readLocal reads whole batches from offset, at most maxBytes of them but
// at least one, below the high watermark of a replica fetchReplica chose,
// after waiting up to wait for the high watermark to pass offset: the
// region read of the HTTP and Kafka fetches. The region must be closed.
// A fetch that names the epoch it fetched last (not -1) is checked first
// (divergence): when the log diverges from the fetcher's, the answer is no
// region and LogPositions.Diverging, at once.
func (a *Agent) readLocal(r *partition.Replica, offset int64, lastFetchedEpoch int32, maxBytes int64, wait time.Duration) (*segstore.Region, kafkabroker.LogPositions, *reply.APIError) {
	log := r.CurrentLog()
	if lastFetchedEpoch >= 0 {
		d, apiErr := divergence(log, lastFetchedEpoch, offset)
		if apiErr != nil {
			return nil, kafkabroker.LogPositions{}, apiErr
		}
		if d != nil {
			return nil, kafkabroker.LogPositions{HW: log.HighWatermark(), LSO: log.LogStartOffset(), Diverging: d}, nil
		}
	}
	if lso, leo := log.LogStartOffset(), log.LogEndOffset(); offset < lso || offset > leo {
		return nil, kafkabroker.LogPositions{}, offsetOutOfRange(offset, lso, log.HighWatermark())
	}
	if wait > 0 && offset >= log.HighWatermark() {
		until := a.now().Add(wait)
		r.WaitFor(wait, a.stopping, nil, func() bool { return r.CurrentLog() != log || log.HighWatermark() > offset })
		// A log that failed meanwhile was replaced by the one the
		// replica reopened (cut to its last good fsync): the rest of the
		// wait is on that one, and the checks above are its to pass.
		if r.CurrentLog() != log {
			return a.readLocal(r, offset, lastFetchedEpoch, maxBytes, max(until.Sub(a.now()), 0))
		}
	}
	hw := log.HighWatermark()
	region, err := log.Read(offset, maxBytes, hw)
	if err != nil {
		return nil, kafkabroker.LogPositions{}, reply.StorageError(err)
	}
	return region, kafkabroker.LogPositions{HW: hw, LSO: log.LogStartOffset()}, nil
}

// divergence is KIP-320's check of a consumer fetch that names the epoch of
// the last batch it read before offset, against the log that serves it, as
// Kafka's Partition.readRecords checks it (and a leader a follower's
// fetch, replicate.EpochEndOffset.Diverges): nil when the log holds that
// epoch up to offset; else the largest epoch at most lastFetchedEpoch in
// the log and where it ends, to which the fetcher truncates. An epoch above
// every one of the log, or an offset below its start, is out of range.
func divergence(log *segstore.Log, lastFetchedEpoch int32, offset int64) (*replicate.EpochEndOffset, *reply.APIError) {
	epoch, end := log.EndOffsetForEpoch(lastFetchedEpoch)
	lso, hw := log.LogStartOffset(), log.HighWatermark()
	if epoch == segstore.UndefinedEpoch || end == segstore.UndefinedOffset {
		e := reply.NewAPIError(fasthttp.StatusRequestedRangeNotSatisfiable, wire.CodeOffsetOutOfRange,
			fmt.Sprintf("last fetched epoch %d is above every epoch of the log", lastFetchedEpoch), false)
		e.LogStartOffset, e.HighWatermark = &lso, &hw
		return nil, e
	}
	if offset < lso {
		return nil, offsetOutOfRange(offset, lso, hw)
	}
	if d := (replicate.EpochEndOffset{Epoch: epoch, EndOffset: end}); d.Diverges(lastFetchedEpoch, offset) {
		return &d, nil
	}
	return nil, nil
}

// The offset parameter's names, as parseOffset returns them.
const (
	offsetEarliest int64 = -2
	offsetLatest   int64 = -1
)

// parseOffset reads the offset parameter: a number, "earliest"
// (offsetEarliest) or "latest" (offsetLatest); absent means earliest, and
// one given without a value is refused, as a negative or overflowing one.
func parseOffset(args *fasthttp.Args) (int64, error) {
	if !args.Has("offset") {
		return offsetEarliest, nil
	}
	switch s := string(args.Peek("offset")); s {
	case "earliest":
		return offsetEarliest, nil
	case "latest":
		return offsetLatest, nil
	default:
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n < 0 {
			return 0, reply.NewAPIError(fasthttp.StatusBadRequest, wire.CodeInvalidOffset, "offset must be a non-negative integer, earliest or latest, not "+strconv.Quote(s), false)
		}
		return n, nil
	}
}

// resolveOffset is the position an offset of parseOffset names in log:
// earliest is the log start, latest the high watermark.
func resolveOffset(at int64, log *segstore.Log) int64 {
	switch at {
	case offsetEarliest:
		return log.LogStartOffset()
	case offsetLatest:
		return log.HighWatermark()
	}
	return at
}

func offsetOutOfRange(offset, lso, hw int64) *reply.APIError {
	e := reply.NewAPIError(fasthttp.StatusRequestedRangeNotSatisfiable, wire.CodeOffsetOutOfRange,
		"offset "+strconv.FormatInt(offset, 10)+" is outside the log", false)
	e.LogStartOffset, e.HighWatermark = &lso, &hw
	return e
}

// acceptsBatches says whether an Accept header allows the binary batch
// format; no Accept header allows it.
func acceptsBatches(accept []byte) bool {
	return len(accept) == 0 || acceptsType(accept, wire.ContentTypeBatch)
}

// acceptsType says whether an Accept header allows the media type mt,
// named or through a wildcard.
func acceptsType(accept []byte, mt string) bool {
	for part := range strings.SplitSeq(string(accept), ",") {
		got, _, err := mime.ParseMediaType(strings.TrimSpace(part))
		if err != nil {
			continue
		}
		if got == mt || got == "*/*" || got == mt[:strings.IndexByte(mt, '/')]+"/*" {
			return true
		}
	}
	return false
}
