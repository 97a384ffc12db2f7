package segstore

import (
	"errors"
	"fmt"
	"syscall"
)

var (
	// ErrClosed is returned by every operation on a closed log.
	ErrClosed = errors.New("segstore: log closed")

	// ErrFailed is matched by every error returned after an I/O error made
	// the log unusable (see FailedError). The log must be closed and opened
	// again, which recovers from what is on disk.
	ErrFailed = errors.New("segstore: log failed")

	// ErrCorrupt is matched by errors that report bytes on disk that cannot
	// be what segstore wrote: a malformed checkpoint file, a bad batch.
	ErrCorrupt = errors.New("segstore: corrupt data")

	// ErrDataLoss is matched by the error Open returns when data below the
	// recovery point, which was known to be durable, is missing or damaged.
	ErrDataLoss = errors.New("segstore: data lost below the recovery point")

	// ErrOffsetOutOfRange is matched by OffsetOutOfRangeError.
	ErrOffsetOutOfRange = errors.New("segstore: offset out of range")

	// ErrNotContiguous reports a follower batch whose base offset is not the
	// log end offset.
	ErrNotContiguous = errors.New("segstore: batch not contiguous with the log end")

	// ErrStaleEpoch reports a batch or epoch older than the latest epoch in
	// the epoch cache.
	ErrStaleEpoch = errors.New("segstore: leader epoch older than the latest")

	// ErrEpochAhead reports a batch from a newer epoch than the one the
	// follower follows: bytes a former leader read after it had moved on.
	ErrEpochAhead = errors.New("segstore: batch from a newer leader epoch than the one followed")

	// ErrInvalidArgument reports a bad option or argument.
	ErrInvalidArgument = errors.New("segstore: invalid argument")

	// ErrNoSpace is matched by the error of an append or a checkpoint that
	// the file system refused for want of space (ENOSPC, EDQUOT). Such an
	// error leaves the log usable: whatever part of the write reached the
	// file was cut off again, nothing was published, and the same call may
	// succeed once space is freed. A log that fails for another reason
	// while out of space (an fsync error) returns a FailedError that may
	// match ErrNoSpace too.
	ErrNoSpace = errors.New("segstore: no space left on device")
)

// isNoSpace says whether err is the file system refusing a write for want
// of space.
func isNoSpace(err error) bool {
	return errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT)
}

// FailedError is the state a log enters after an I/O error on a write path.
// It matches ErrFailed and unwraps to the original error.
type FailedError struct {
	Err error
}

func (e *FailedError) Error() string { return "segstore: log failed: " + e.Err.Error() }

// Is makes errors.Is(err, ErrFailed) true.
func (e *FailedError) Is(target error) bool { return target == ErrFailed }

// Unwrap returns the I/O error that failed the log.
func (e *FailedError) Unwrap() error { return e.Err }

// OffsetOutOfRangeError reports a read outside [LogStartOffset, LogEndOffset].
type OffsetOutOfRangeError struct {
	Offset         int64
	LogStartOffset int64
	LogEndOffset   int64
}

func (e *OffsetOutOfRangeError) Error() string {
	return fmt.Sprintf("segstore: offset %d out of range [%d, %d]", e.Offset, e.LogStartOffset, e.LogEndOffset)
}

// Is makes errors.Is(err, ErrOffsetOutOfRange) true.
func (e *OffsetOutOfRangeError) Is(target error) bool { return target == ErrOffsetOutOfRange }

// CorruptError locates bytes on disk that cannot be valid. It matches
// ErrCorrupt and unwraps to the underlying cause (often a record error).
type CorruptError struct {
	Path     string
	Position int64
	Err      error
}

func (e *CorruptError) Error() string {
	return fmt.Sprintf("segstore: corrupt data in %s at position %d: %v", e.Path, e.Position, e.Err)
}

// Is makes errors.Is(err, ErrCorrupt) true.
func (e *CorruptError) Is(target error) bool { return target == ErrCorrupt }

// Unwrap returns the cause.
func (e *CorruptError) Unwrap() error { return e.Err }

// DataLossError reports that the log is missing or damaged at Offset, below
// the recovery point RecoveryPoint that was known to be durable. A replica
// that sees it has lost acknowledged data: it must not lead and must fetch
// the log again from the leader. It matches ErrDataLoss.
type DataLossError struct {
	Offset        int64
	RecoveryPoint int64
	Path          string
	Err           error
}

func (e *DataLossError) Error() string {
	return fmt.Sprintf("segstore: data lost at offset %d below the recovery point %d (%s): %v",
		e.Offset, e.RecoveryPoint, e.Path, e.Err)
}

// Is makes errors.Is(err, ErrDataLoss) true.
func (e *DataLossError) Is(target error) bool { return target == ErrDataLoss }

// Unwrap returns the cause.
func (e *DataLossError) Unwrap() error { return e.Err }
