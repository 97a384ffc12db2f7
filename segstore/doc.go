// Package segstore keeps one partition's log on disk (docs/design.md §5): batches in
// segment files named by base offset, a sparse mmap'd offset index per
// segment, a leader epoch cache, small checkpoint files, group-committed
// fsyncs, retention, truncation, and recovery after an unclean stop.
//
// # Directory layout
//
//	<dir>/
//	  00000000000000000000.log     batches back to back (record.Header format)
//	  00000000000000000000.index   sparse offset index, see index.go
//	  leader-epoch-checkpoint      epoch cache, see epochs.go
//	  hw-checkpoint                high watermark, see checkpoint.go
//	  log-start-offset             first offset kept, see checkpoint.go
//	  recovery-point               where recovery starts, see checkpoint.go
//
// # Durability
//
// Appends write to the page cache. Sync is a group commit: one fsync covers
// every append made before it, and callers arriving while an fsync is in
// flight share the next one. A failed fsync or write is fatal: the log moves
// to a failed state (ErrFailed) and never retries, because after a failed
// fsync Linux may have dropped the dirty pages and would report the next
// fsync as a success. The owner closes the log and opens it again, which
// recovers from what is on disk; an in-process reopen passes the failed log
// as Options.Reopen, so that Open cuts what no successful fsync covered
// (the page cache may still serve it) and keeps the high watermark.
//
// Running out of space (ENOSPC, EDQUOT) while appending, rolling,
// checkpointing, or writing the checkpoint (or, at the first segment's
// start, creating the new files) that must precede a truncation or a
// retention deletion is not an I/O error: the call returns an error matching
// ErrNoSpace, any part of the refused write is cut off the file again, and
// the log stays usable, for reads and for appends once space is freed. Only
// a refusal after part of a multi-batch append was published fails the log.
// Open, too, works on a full disk when it needs to cut nothing below the
// recovery point nor a segment back to its start (which gets new files): it
// keeps the recovery point it found, and reads a segment whose rebuilt index
// it cannot write without one until the next Open.
//
// # Recovery
//
// The recovery point is the last position known to be durable, together with
// the index entries and epoch cache entries below it; it is written by
// Checkpoint and Close (see recovery.go for the exact invariant). Open trusts
// the log below it after a structural check of the boundary, validates every
// batch above it, cuts a torn or corrupt tail, drops later segments, and
// rebuilds indexes that do not match. Damage found below the recovery point
// is not cut: Open fails with an error matching ErrDataLoss that names the
// offset, unless Options.RepairDataLoss asks for the cut.
//
// # Concurrency
//
// Appends, truncation and retention are single-writer (serialized inside the
// Log). Reads, Sync, Checkpoint and the accessors may run concurrently with
// them. A Region returned by Read stays valid until it is closed, even if its
// segment is deleted by retention or truncation meanwhile.
//
// All file I/O goes through FS, so tests can inject errors and simulate
// crashes with FaultFS.
package segstore
