package segstore

import (
	"fmt"
	"math"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/logagent/logagent/record"
)

// Defaults for the zero values of Options.
const (
	DefaultSegmentBytes       = 1 << 30
	DefaultIndexIntervalBytes = 4096
	DefaultIndexBytes         = 10 << 20
	DefaultMaxBatchBytes      = 16 << 20
)

// Options configure a Log. Zero sizes take the defaults above; zero
// durations disable what they control.
type Options struct {
	// SegmentBytes rolls to a new segment when the next batch would take the
	// active one past this size. At most 4 GiB - 1: index positions are u32.
	SegmentBytes int64
	// SegmentAge rolls to a new segment once the active one received its
	// first batch this long ago (by Now). Zero: no age-based roll.
	SegmentAge time.Duration
	// IndexIntervalBytes is the distance in log bytes between index entries.
	IndexIntervalBytes int
	// IndexBytes is the size each active index file is preallocated to; a
	// full index rolls the segment. Rounded down to a multiple of 8.
	IndexBytes int
	// MaxBatchBytes bounds the size of one batch, on append and on recovery.
	MaxBatchBytes int
	// Retention lets ApplyRetention delete segments whose newest record is
	// older than this. Zero: no age limit.
	Retention time.Duration
	// RetentionBytes lets ApplyRetention delete the oldest segments while the
	// log is larger than this. Zero: no size limit.
	RetentionBytes int64
	// RepairDataLoss makes Open cut the log where it finds damage below the
	// recovery point instead of failing with ErrDataLoss. The caller must then
	// treat the replica as having lost acknowledged data (see Log.DataLoss).
	RepairDataLoss bool
	// Reopen is the log, closed, that this Open replaces in the same
	// process, typically after it failed. After a failed fsync the page
	// cache may still hold bytes that never reached the disk and read back
	// as valid (fsyncgate): Open keeps only what a successful fsync of
	// Reopen covered and cuts the rest. The new log's high watermark is
	// Reopen's (which may be newer than the checkpoint), clamped to what
	// Open kept. Regions of Reopen may still name what Open cuts: those
	// bytes are never written again in the same file (see Truncate).
	Reopen *Log
	// Files is the cache of open descriptors this log shares with the other
	// logs of the process, whose bound is per process (docs/design.md §5,
	// "Open files"). Default: a cache of this log's own, bounded at
	// DefaultMaxOpenFiles.
	Files *FileCache
	// Logger receives recovery and retention events. Default: discard.
	Logger hclog.Logger
	// Now is the clock for segment age and retention, and for timing the
	// fsyncs OnSync hears of. Default: time.Now.
	Now func() time.Time
	// OnSync, if set, is told how long each group-commit fsync of Sync
	// took (the segments' files and the directory together; a failed one
	// too), for the agent's metrics. It runs on the syncing goroutine,
	// with no lock of the log held: it must be quick.
	OnSync func(time.Duration)
}

func (o Options) withDefaults() (Options, error) {
	if o.SegmentBytes == 0 {
		o.SegmentBytes = DefaultSegmentBytes
	}
	if o.IndexIntervalBytes == 0 {
		o.IndexIntervalBytes = DefaultIndexIntervalBytes
	}
	if o.IndexBytes == 0 {
		o.IndexBytes = DefaultIndexBytes
	}
	if o.MaxBatchBytes == 0 {
		o.MaxBatchBytes = DefaultMaxBatchBytes
	}
	o.IndexBytes -= o.IndexBytes % indexEntrySize
	switch {
	case o.SegmentBytes < 0 || o.SegmentBytes > math.MaxUint32:
		return o, fmt.Errorf("%w: segment bytes %d not in (0, %d]", ErrInvalidArgument, o.SegmentBytes, int64(math.MaxUint32))
	case o.IndexIntervalBytes < 0:
		return o, fmt.Errorf("%w: negative index interval %d", ErrInvalidArgument, o.IndexIntervalBytes)
	case o.IndexBytes < indexEntrySize:
		return o, fmt.Errorf("%w: index bytes %d hold no entry", ErrInvalidArgument, o.IndexBytes)
	case o.MaxBatchBytes < record.HeaderSize || o.MaxBatchBytes > math.MaxInt32:
		return o, fmt.Errorf("%w: max batch bytes %d", ErrInvalidArgument, o.MaxBatchBytes)
	case o.SegmentAge < 0 || o.Retention < 0 || o.RetentionBytes < 0:
		return o, fmt.Errorf("%w: negative segment age, retention or retention bytes", ErrInvalidArgument)
	}
	if o.Logger == nil {
		o.Logger = hclog.NewNullLogger()
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return o, nil
}
