package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"path/filepath"
	"text/tabwriter"
	"time"

	"github.com/logagent/logagent/record"
)

// LimitResult is one baseline: how fast the machine moves bytes without
// logagent in the way.
type LimitResult struct {
	// Name says what was measured: "loopback TCP", "file write" or
	// "file write + fsync".
	Name string
	// WriteBytes is the size of each write.
	WriteBytes int
	Elapsed    time.Duration
	Bytes      int64
	// Ops counts writes (with their fsync when there is one).
	Ops int64
	// OpLatency is the time of each write (and its fsync).
	OpLatency Histogram
}

// BytesPerSecond is Bytes over Elapsed.
func (r *LimitResult) BytesPerSecond() float64 { return perSecond(float64(r.Bytes), r.Elapsed) }

// LoopbackConfig is a loopback TCP baseline.
type LoopbackConfig struct {
	// Duration is how long the writer writes.
	Duration time.Duration
	// WriteBytes is the size of each write (default 1 MiB).
	WriteBytes int
	Clock      Clock
}

// LoopbackTCP measures TCP throughput over 127.0.0.1 between two goroutines
// of this process: one writes WriteBytes at a time for Duration, the other
// reads with a buffer of the same size. The figure is bytes read over the
// time from the first write to the last read.
func LoopbackTCP(ctx context.Context, cfg LoopbackConfig) (*LimitResult, error) {
	if cfg.WriteBytes == 0 {
		cfg.WriteBytes = 1 << 20
	}
	if cfg.Duration <= 0 || cfg.WriteBytes < 0 {
		return nil, fmt.Errorf("%w: loopback duration %v, write size %d", ErrInvalidConfig, cfg.Duration, cfg.WriteBytes)
	}
	clock := orSystemClock(cfg.Clock)
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("bench: loopback listen: %w", err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	acceptErr := make(chan error, 1)
	go func() {
		conn, err := ln.Accept()
		if err != nil {
			acceptErr <- err
			return
		}
		accepted <- conn
	}()
	var d net.Dialer
	writer, err := d.DialContext(ctx, "tcp", ln.Addr().String())
	if err != nil {
		return nil, fmt.Errorf("bench: loopback dial: %w", err)
	}
	defer writer.Close()
	var reader net.Conn
	select {
	case reader = <-accepted:
	case err := <-acceptErr:
		return nil, fmt.Errorf("bench: loopback accept: %w", err)
	case <-ctx.Done():
		return nil, fmt.Errorf("bench: loopback accept: %w", ctx.Err())
	}
	defer reader.Close()
	// Closing both ends is what unblocks a Read or Write when ctx ends.
	stop := context.AfterFunc(ctx, func() {
		writer.Close()
		reader.Close()
	})
	defer stop()

	type readOutcome struct {
		bytes int64
		end   time.Time
		err   error
	}
	read := make(chan readOutcome, 1)
	go func() {
		buf := make([]byte, cfg.WriteBytes)
		var n int64
		for {
			m, err := reader.Read(buf)
			n += int64(m)
			if err != nil {
				if errors.Is(err, io.EOF) {
					err = nil
				}
				read <- readOutcome{bytes: n, end: clock.Now(), err: err}
				return
			}
		}
	}()

	res := &LimitResult{Name: "loopback TCP", WriteBytes: cfg.WriteBytes}
	buf := make([]byte, cfg.WriteBytes)
	start := clock.Now()
	end := start.Add(cfg.Duration)
	var writeErr error
	for now := start; now.Before(end); {
		if _, writeErr = writer.Write(buf); writeErr != nil {
			break
		}
		after := clock.Now()
		res.OpLatency.Record(after.Sub(now))
		res.Ops++
		now = after
	}
	if writeErr == nil {
		writeErr = writer.(*net.TCPConn).CloseWrite()
	}
	outcome := <-read
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("bench: loopback: %w", err)
	}
	if writeErr != nil {
		return nil, fmt.Errorf("bench: loopback write: %w", writeErr)
	}
	if outcome.err != nil {
		return nil, fmt.Errorf("bench: loopback read: %w", outcome.err)
	}
	res.Bytes, res.Elapsed = outcome.bytes, outcome.end.Sub(start)
	return res, nil
}

// FileWriteConfig is a sequential file write baseline.
type FileWriteConfig struct {
	// Dir is where the temporary directory for the files is made (default
	// os.TempDir()); it is removed at the end.
	Dir string
	// WriteBytes is the size of each write; BatchBytes gives the size of
	// a logagent batch.
	WriteBytes int
	// Fsync makes every write followed by an fsync of the file, as a
	// partition leader does for each group commit with durability "fsync".
	Fsync    bool
	Duration time.Duration
	// SegmentBytes rolls to a new file (and deletes the old one) when the
	// next write would pass it, so that the disk space used stays bounded
	// (default 64 MiB).
	SegmentBytes int64
	// KeepFiles keeps every file until the end of the run instead of
	// deleting each one as the next starts. A deleted file's pages go back
	// to the kernel and the next file's writes land in them again; a log
	// that keeps its segments writes into pages it has never used, which
	// on some virtual machines costs far more (docs/benchmarks.md, "What a
	// new page costs on this host"). The disk space used grows with the
	// run.
	KeepFiles bool
	Clock     Clock
}

// FileWrite measures appends to a file as segstore makes them: a positional
// write of WriteBytes at the end of the file, then, with Fsync, an fsync of
// the file before the next write. A new file is created with an fsync of
// its directory, as a segment roll is.
func FileWrite(ctx context.Context, cfg FileWriteConfig) (*LimitResult, error) {
	if cfg.SegmentBytes == 0 {
		cfg.SegmentBytes = 64 << 20
	}
	if cfg.Duration <= 0 || cfg.WriteBytes <= 0 || cfg.SegmentBytes < int64(cfg.WriteBytes) {
		return nil, fmt.Errorf("%w: file write duration %v, write size %d, segment size %d",
			ErrInvalidConfig, cfg.Duration, cfg.WriteBytes, cfg.SegmentBytes)
	}
	clock := orSystemClock(cfg.Clock)
	dir, err := os.MkdirTemp(cfg.Dir, "logagent-bench-")
	if err != nil {
		return nil, fmt.Errorf("bench: file write: %w", err)
	}
	defer os.RemoveAll(dir)

	res := &LimitResult{Name: "file write", WriteBytes: cfg.WriteBytes}
	if cfg.Fsync {
		res.Name = "file write + fsync"
	}
	if cfg.KeepFiles {
		res.Name += ", files kept"
	}
	buf := make([]byte, cfg.WriteBytes)
	for i := range buf {
		buf[i] = byte(i*7 + 1)
	}
	var f *os.File
	defer func() {
		if f != nil {
			f.Close()
		}
	}()
	var pos int64
	segment := 0
	start := clock.Now()
	end := start.Add(cfg.Duration)
	for now := start; now.Before(end); {
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("bench: file write: %w", err)
		}
		if f == nil || pos+int64(len(buf)) > cfg.SegmentBytes {
			if f, err = rollFile(dir, f, segment, !cfg.KeepFiles); err != nil {
				return nil, err
			}
			segment++
			pos = 0
		}
		if _, err := f.WriteAt(buf, pos); err != nil {
			return nil, fmt.Errorf("bench: file write: %w", err)
		}
		if cfg.Fsync {
			if err := f.Sync(); err != nil {
				return nil, fmt.Errorf("bench: file fsync: %w", err)
			}
		}
		pos += int64(len(buf))
		after := clock.Now()
		res.OpLatency.Record(after.Sub(now))
		res.Ops++
		res.Bytes += int64(len(buf))
		now = after
	}
	res.Elapsed = clock.Now().Sub(start)
	return res, nil
}

// rollFile closes old (when there is one), deleting it when remove is set,
// and creates file n in dir, durably.
func rollFile(dir string, old *os.File, n int, remove bool) (*os.File, error) {
	if old != nil {
		name := old.Name()
		if err := old.Close(); err != nil {
			return nil, fmt.Errorf("bench: file write: %w", err)
		}
		if remove {
			if err := os.Remove(name); err != nil {
				return nil, fmt.Errorf("bench: file write: %w", err)
			}
		}
	}
	f, err := os.OpenFile(filepath.Join(dir, fmt.Sprintf("%020d.log", n)), os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, fmt.Errorf("bench: file write: %w", err)
	}
	d, err := os.Open(dir)
	if err == nil {
		err = d.Sync()
		d.Close()
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("bench: fsync directory: %w", err)
	}
	return f, nil
}

// BatchBytes is the size of an uncompressed logagent batch of records
// records with values of recordBytes bytes and no keys: what one produce
// request of that shape writes to a partition's log.
func BatchBytes(recordBytes, records int) (int, error) {
	if recordBytes < 0 || records <= 0 {
		return 0, fmt.Errorf("%w: batch of %d records of %d bytes", ErrInvalidConfig, records, recordBytes)
	}
	var b record.Builder
	value := make([]byte, recordBytes)
	for range records {
		if err := b.Add(0, nil, value, nil); err != nil {
			return 0, fmt.Errorf("bench: batch size: %w", err)
		}
	}
	return b.Size(), nil
}

// WriteLimitsTable writes baselines for people, one per line.
func WriteLimitsTable(w io.Writer, results []*LimitResult) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "baseline\twrite bytes\telapsed\tthroughput\twrites/s\tp50\tp99\tmax")
	for _, r := range results {
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%.0f\t%s\t%s\t%s\n", r.Name, r.WriteBytes, r.Elapsed.Round(time.Millisecond),
			throughput(r.BytesPerSecond()), perSecond(float64(r.Ops), r.Elapsed),
			roundDuration(r.OpLatency.Quantile(0.5)), roundDuration(r.OpLatency.Quantile(0.99)), roundDuration(r.OpLatency.Max()))
	}
	return tw.Flush()
}

// throughput prints bytes per second in GB/s (10^9) or MB/s (10^6).
func throughput(bytesPerSecond float64) string {
	if bytesPerSecond >= 1e9 {
		return fmt.Sprintf("%.2f GB/s", bytesPerSecond/1e9)
	}
	return fmt.Sprintf("%.1f MB/s", bytesPerSecond/1e6)
}

// WriteLimitsJSON writes baselines as a JSON array, one object each:
//
//	[{"name":"loopback TCP","write_bytes":1048576,"elapsed_seconds":3.001,
//	  "bytes":17400000000,"mb_per_second":5797.4,"writes":16594,
//	  "writes_per_second":5529.5,"write_latency_us":{"count":16594,...}}]
func WriteLimitsJSON(w io.Writer, results []*LimitResult) error {
	type jsonLimit struct {
		Name            string         `json:"name"`
		WriteBytes      int            `json:"write_bytes"`
		ElapsedSeconds  float64        `json:"elapsed_seconds"`
		Bytes           int64          `json:"bytes"`
		MBPerSecond     float64        `json:"mb_per_second"`
		Writes          int64          `json:"writes"`
		WritesPerSecond float64        `json:"writes_per_second"`
		WriteLatency    LatencySummary `json:"write_latency_us"`
	}
	out := make([]jsonLimit, 0, len(results))
	for _, r := range results {
		out = append(out, jsonLimit{
			Name:            r.Name,
			WriteBytes:      r.WriteBytes,
			ElapsedSeconds:  math.Round(r.Elapsed.Seconds()*1000) / 1000,
			Bytes:           r.Bytes,
			MBPerSecond:     math.Round(r.BytesPerSecond()/1e6*10) / 10,
			Writes:          r.Ops,
			WritesPerSecond: math.Round(perSecond(float64(r.Ops), r.Elapsed)*10) / 10,
			WriteLatency:    Summarize(&r.OpLatency),
		})
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(out)
}
