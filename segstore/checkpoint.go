package segstore

import (
	"bytes"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"strconv"
)

// Checkpoint files are small text files, each replaced atomically: written
// to <name>.tmp, fsynced, renamed over <name>, and the directory fsynced.
// Each starts with a version line and ends every line with "\n". Version 1
// ends with a checksum line: "crc32c ", then the CRC-32C (Castagnoli, as
// record batches use) of every byte before that line, as exactly 8
// lowercase hex digits ("%08x"). A reader checks it before it parses a
// number, so a flipped digit (bit rot, a misdirected or torn write) is
// ErrCorrupt rather than a valid-looking offset.
//
//	hw-checkpoint        log-start-offset     recovery-point
//	+---------------+    +---------------+    +-------------------------------+
//	| 1             |    | 1             |    | 1                             |
//	| <hw>          |    | <offset>      |    | <offset> <segment base> <pos> |
//	| crc32c <crc>  |    | crc32c <crc>  |    | crc32c <crc>                  |
//	+---------------+    +---------------+    +-------------------------------+
//
//	leader-epoch-checkpoint (Kafka's layout, plus the checksum line)
//	+-----------------+
//	| 1               |  version
//	| <n>             |  number of entries
//	| <epoch> <start> |  n lines, strictly increasing in both fields
//	| crc32c <crc>    |  CRC-32C of every byte above this line
//	+-----------------+
//
// A high watermark of 42 is the 21 bytes "1\n42\ncrc32c a31ba5ab\n".
//
// Version 0, written by earlier releases, is the same without the checksum
// line. It is still read, and the log rewrites each version 0 file it
// found in version 1 at its next checkpoint (Log.legacyCheckpoints).
//
// A checkpoint that does not read back as what segstore wrote (a wrong
// checksum, an unknown version, a malformed or impossible value) fails
// Open with a *CorruptError naming the file, whichever the file; recovery
// never guesses around it. Trusting it could skip validating bytes (a
// recovery point too high), serve uncommitted records as committed (a high
// watermark too high), hide records (a log start offset too high) or answer
// epoch queries wrongly (a bad epoch entry), and ignoring it is no better:
// without its recovery point, damage below the real one would be cut as a
// torn tail instead of reported as ErrDataLoss, and without the epoch file
// the trusted part of the log would lose its epoch entries. The owner keeps
// the log closed and reports the error (the agent keeps the partition
// offline and retries the open; docs/design.md §5).
//
// The recovery point names the segment and byte position of an offset, so
// recovery can start validating exactly there without an index lookup.
const (
	hwCheckpointFile    = "hw-checkpoint"
	logStartOffsetFile  = "log-start-offset"
	recoveryPointFile   = "recovery-point"
	epochCheckpointFile = "leader-epoch-checkpoint"
	tmpSuffix           = ".tmp"

	// checkpointVersion is the version written; checkpointVersionLegacy
	// (no checksum line) is still read.
	checkpointVersion       = 1
	checkpointVersionLegacy = 0
	// checksumPrefix starts a version 1 file's last line.
	checksumPrefix = "crc32c "
	// maxCheckpointBytes bounds what Open reads from a checkpoint file.
	maxCheckpointBytes = 1 << 20
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// checksumLine is the last line of a version 1 file whose bytes before it
// are body, without its newline.
func checksumLine(body []byte) string {
	return fmt.Sprintf("%s%08x", checksumPrefix, crc32.Checksum(body, castagnoli))
}

// noSpaceCheckpoint marks a checkpoint the file system refused for want of
// space with ErrNoSpace, after removing its temporary file: the checkpoint
// in place is untouched, so the log may go on with it.
func noSpaceCheckpoint(fsys FS, tmp string, err error) error {
	if !isNoSpace(err) {
		return err
	}
	if rerr := fsys.Remove(tmp); rerr != nil && !isNotExist(rerr) {
		return fmt.Errorf("%w (removing %s: %w)", err, tmp, rerr)
	}
	return fmt.Errorf("%w: %w", ErrNoSpace, err)
}

// writeCheckpointFile replaces dir/name atomically with lines of integers,
// in version 1.
func writeCheckpointFile(fsys FS, dir, name string, lines [][]int64) error {
	buf := make([]byte, 0, 32*len(lines)+32)
	buf = strconv.AppendInt(buf, checkpointVersion, 10)
	buf = append(buf, '\n')
	for _, fields := range lines {
		for i, v := range fields {
			if i > 0 {
				buf = append(buf, ' ')
			}
			buf = strconv.AppendInt(buf, v, 10)
		}
		buf = append(buf, '\n')
	}
	buf = append(append(buf, checksumLine(buf)...), '\n')
	path := filepath.Join(dir, name)
	tmp := path + tmpSuffix
	f, err := fsys.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o644)
	if err != nil {
		return noSpaceCheckpoint(fsys, tmp, fmt.Errorf("segstore: checkpoint %s: %w", name, err))
	}
	if _, err := f.WriteAt(buf, 0); err != nil {
		f.Close()
		return noSpaceCheckpoint(fsys, tmp, fmt.Errorf("segstore: checkpoint %s: write: %w", name, err))
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("segstore: checkpoint %s: fsync: %w", name, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("segstore: checkpoint %s: close: %w", name, err)
	}
	if err := fsys.Rename(tmp, path); err != nil {
		// rename(2) is refused for space when the directory has no room
		// for the entry; the file in place is untouched, as after a
		// refused write.
		return noSpaceCheckpoint(fsys, tmp, fmt.Errorf("segstore: checkpoint %s: rename: %w", name, err))
	}
	if err := fsys.SyncDir(dir); err != nil {
		return fmt.Errorf("segstore: checkpoint %s: fsync directory: %w", name, err)
	}
	return nil
}

// checkpointReader reads checkpoint files and notes the names of those it
// found in version 0 in legacy (when not nil), for the log to rewrite.
type checkpointReader struct {
	fs     FS
	dir    string
	legacy map[string]bool
}

// file returns the lines after the version line, up to the checksum line
// (in version 0, to the end), each with exactly width integers, or any
// number of them when width is 0. found is false when the file does not
// exist.
func (c checkpointReader) file(name string, width int) (lines [][]int64, found bool, err error) {
	path := filepath.Join(c.dir, name)
	f, err := c.fs.OpenFile(path, os.O_RDONLY, 0)
	if errors.Is(err, os.ErrNotExist) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("segstore: read checkpoint %s: %w", name, err)
	}
	defer f.Close()
	size, err := f.Size()
	if err != nil {
		return nil, false, fmt.Errorf("segstore: read checkpoint %s: %w", name, err)
	}
	corrupt := func(format string, args ...any) error {
		return &CorruptError{Path: path, Err: fmt.Errorf(format, args...)}
	}
	if size > maxCheckpointBytes {
		return nil, false, corrupt("checkpoint of %d bytes", size)
	}
	buf := make([]byte, size)
	if n, err := f.ReadAt(buf, 0); n < len(buf) {
		if err == nil || errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return nil, false, fmt.Errorf("segstore: read checkpoint %s: %w", name, err)
	}
	if len(buf) == 0 || buf[len(buf)-1] != '\n' {
		return nil, false, corrupt("missing final newline")
	}
	rows := bytes.Split(buf[:len(buf)-1], []byte{'\n'})
	switch string(rows[0]) {
	case strconv.Itoa(checkpointVersion):
		// The checksum covers every byte before its line and is checked
		// before anything else is believed. The line must be exactly what
		// the writer makes: taking upper-case hex digits too would let a
		// flipped bit (0x20) through.
		if len(rows) < 2 {
			return nil, false, corrupt("missing checksum line")
		}
		last := rows[len(rows)-1]
		if want := checksumLine(buf[:len(buf)-1-len(last)]); string(last) != want {
			return nil, false, corrupt("checksum line %q, the content's is %q", last, want)
		}
		rows = rows[1 : len(rows)-1]
	case strconv.Itoa(checkpointVersionLegacy):
		if c.legacy != nil {
			c.legacy[name] = true
		}
		rows = rows[1:]
	default:
		return nil, false, corrupt("unknown version %q", rows[0])
	}
	for i, row := range rows {
		fields := bytes.Split(row, []byte{' '})
		if width > 0 && len(fields) != width {
			return nil, false, corrupt("line %d has %d fields, want %d", i+2, len(fields), width)
		}
		vals := make([]int64, len(fields))
		for j, field := range fields {
			v, err := strconv.ParseInt(string(field), 10, 64)
			if err != nil {
				return nil, false, corrupt("line %d: %v", i+2, err)
			}
			vals[j] = v
		}
		lines = append(lines, vals)
	}
	return lines, true, nil
}

// offset reads a file holding one non-negative offset.
func (c checkpointReader) offset(name string) (int64, bool, error) {
	lines, found, err := c.file(name, 1)
	if err != nil || !found {
		return 0, found, err
	}
	if len(lines) != 1 || lines[0][0] < 0 {
		return 0, false, &CorruptError{Path: filepath.Join(c.dir, name), Err: fmt.Errorf("want one non-negative offset, have %v", lines)}
	}
	return lines[0][0], true, nil
}

func writeOffsetCheckpoint(fsys FS, dir, name string, offset int64) error {
	return writeCheckpointFile(fsys, dir, name, [][]int64{{offset}})
}

// logPosition is an offset at a batch boundary and where it lives on disk.
type logPosition struct {
	offset      int64
	segmentBase int64
	pos         int64
}

func (c checkpointReader) recoveryPoint() (logPosition, bool, error) {
	lines, found, err := c.file(recoveryPointFile, 3)
	if err != nil || !found {
		return logPosition{}, found, err
	}
	if len(lines) == 1 {
		p := logPosition{offset: lines[0][0], segmentBase: lines[0][1], pos: lines[0][2]}
		// A position at the start of a segment is that segment's base offset.
		if p.segmentBase >= 0 && p.pos >= 0 && p.offset >= p.segmentBase && (p.pos > 0 || p.offset == p.segmentBase) {
			return p, true, nil
		}
	}
	return logPosition{}, false, &CorruptError{Path: filepath.Join(c.dir, recoveryPointFile), Err: fmt.Errorf("impossible recovery point %v", lines)}
}

func writeRecoveryPoint(fsys FS, dir string, p logPosition) error {
	return writeCheckpointFile(fsys, dir, recoveryPointFile, [][]int64{{p.offset, p.segmentBase, p.pos}})
}

func (c checkpointReader) epochs() ([]EpochEntry, error) {
	path := filepath.Join(c.dir, epochCheckpointFile)
	lines, found, err := c.file(epochCheckpointFile, 0)
	if err != nil || !found {
		return nil, err
	}
	corrupt := func(format string, args ...any) error {
		return &CorruptError{Path: path, Err: fmt.Errorf(format, args...)}
	}
	if len(lines) == 0 || len(lines[0]) != 1 {
		return nil, corrupt("missing entry count")
	}
	n := lines[0][0]
	if n != int64(len(lines)-1) {
		return nil, corrupt("entry count %d, have %d entries", n, len(lines)-1)
	}
	entries := make([]EpochEntry, 0, n)
	for i, l := range lines[1:] {
		if len(l) != 2 || l[0] < 0 || l[0] > 1<<31-1 || l[1] < 0 {
			return nil, corrupt("bad entry on line %d", i+3)
		}
		e := EpochEntry{Epoch: int32(l[0]), StartOffset: l[1]}
		if k := len(entries); k > 0 && (e.Epoch <= entries[k-1].Epoch || e.StartOffset <= entries[k-1].StartOffset) {
			return nil, corrupt("entries not increasing on line %d", i+3)
		}
		entries = append(entries, e)
	}
	return entries, nil
}

func writeEpochCheckpoint(fsys FS, dir string, entries []EpochEntry) error {
	lines := make([][]int64, 0, len(entries)+1)
	lines = append(lines, []int64{int64(len(entries))})
	for _, e := range entries {
		lines = append(lines, []int64{int64(e.Epoch), e.StartOffset})
	}
	return writeCheckpointFile(fsys, dir, epochCheckpointFile, lines)
}
