package segstore

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// checkpointCase is one kind of checkpoint file holding one value, with
// what an earlier release (version 0) wrote for it.
type checkpointCase struct {
	desc  string
	file  string
	write func(fsys FS, dir string) error
	read  func(ck checkpointReader) (any, bool, error)
	want  any
	v0    string
}

func checkpointCases() []checkpointCase {
	offset := func(name string, v int64, v0 string) checkpointCase {
		return checkpointCase{
			desc:  name,
			file:  name,
			write: func(fsys FS, dir string) error { return writeOffsetCheckpoint(fsys, dir, name, v) },
			read:  func(ck checkpointReader) (any, bool, error) { return ck.offset(name) },
			want:  v,
			v0:    v0,
		}
	}
	epochs := func(desc string, entries []EpochEntry, v0 string) checkpointCase {
		return checkpointCase{
			desc:  desc,
			file:  epochCheckpointFile,
			write: func(fsys FS, dir string) error { return writeEpochCheckpoint(fsys, dir, entries) },
			read: func(ck checkpointReader) (any, bool, error) {
				got, err := ck.epochs()
				return got, got != nil, err
			},
			want: entries,
			v0:   v0,
		}
	}
	rp := logPosition{offset: 4242, segmentBase: 4000, pos: 8191}
	return []checkpointCase{
		offset(hwCheckpointFile, 42, "0\n42\n"),
		offset(logStartOffsetFile, 1234567890123, "0\n1234567890123\n"),
		{
			desc:  recoveryPointFile,
			file:  recoveryPointFile,
			write: func(fsys FS, dir string) error { return writeRecoveryPoint(fsys, dir, rp) },
			read: func(ck checkpointReader) (any, bool, error) {
				return ck.recoveryPoint()
			},
			want: rp,
			v0:   "0\n4242 4000 8191\n",
		},
		epochs(epochCheckpointFile, []EpochEntry{{0, 0}, {3, 17}, {1<<31 - 1, 9000000000}}, "0\n3\n0 0\n3 17\n2147483647 9000000000\n"),
		epochs(epochCheckpointFile+" empty", []EpochEntry{}, "0\n0\n"),
	}
}

// TestCheckpointRoundTrip: every kind of checkpoint file reads back what
// was written, in version 1 with its checksum line, and leaves no
// temporary file.
func TestCheckpointRoundTrip(t *testing.T) {
	for _, tc := range checkpointCases() {
		t.Run(tc.desc, func(t *testing.T) {
			dir := t.TempDir()
			if err := tc.write(OSFS{}, dir); err != nil {
				t.Fatal(err)
			}
			ck := checkpointReader{fs: OSFS{}, dir: dir, legacy: map[string]bool{}}
			got, found, err := tc.read(ck)
			if err != nil || !found || !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("read %v (found %v, error %v), wrote %v", got, found, err, tc.want)
			}
			if len(ck.legacy) != 0 {
				t.Fatalf("a file just written counts as version 0: %v", ck.legacy)
			}
			raw, err := os.ReadFile(filepath.Join(dir, tc.file))
			if err != nil {
				t.Fatal(err)
			}
			lines := strings.Split(strings.TrimSuffix(string(raw), "\n"), "\n")
			if lines[0] != "1" || !strings.HasPrefix(lines[len(lines)-1], "crc32c ") || len(lines[len(lines)-1]) != len("crc32c ")+8 {
				t.Fatalf("file %q: want version 1 ending with its checksum line", raw)
			}
			if _, err := os.Stat(filepath.Join(dir, tc.file+tmpSuffix)); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("temporary file left: %v", err)
			}
		})
	}
	// The example of checkpoint.go, byte for byte.
	dir := t.TempDir()
	if err := writeOffsetCheckpoint(OSFS{}, dir, hwCheckpointFile, 42); err != nil {
		t.Fatal(err)
	}
	if raw, _ := os.ReadFile(filepath.Join(dir, hwCheckpointFile)); string(raw) != "1\n42\ncrc32c a31ba5ab\n" {
		t.Fatalf("hw-checkpoint of 42 is %q", raw)
	}
}

// TestCheckpointCorruptionDetected: flipping any one bit of any byte of a
// version 1 checkpoint file, or cutting it short anywhere (a torn write),
// is reported as a *CorruptError naming the file, never read as a value.
// Version 0 read a flipped digit as another valid offset.
func TestCheckpointCorruptionDetected(t *testing.T) {
	for _, tc := range checkpointCases() {
		t.Run(tc.desc, func(t *testing.T) {
			dir := t.TempDir()
			if err := tc.write(OSFS{}, dir); err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(dir, tc.file)
			raw, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			check := func(content []byte, format string, args ...any) {
				t.Helper()
				what := fmt.Sprintf(format, args...)
				if err := os.WriteFile(path, content, 0o644); err != nil {
					t.Fatal(err)
				}
				got, found, err := tc.read(checkpointReader{fs: OSFS{}, dir: dir})
				var ce *CorruptError
				if !errors.As(err, &ce) || !errors.Is(err, ErrCorrupt) || ce.Path != path {
					t.Errorf("%s: %q read as %v (found %v, error %v), want a *CorruptError for %s", what, content, got, found, err, path)
				}
			}
			for pos := range raw {
				for bit := range 8 {
					flipped := []byte(string(raw))
					flipped[pos] ^= 1 << bit
					check(flipped, "bit %d of byte %d flipped", bit, pos)
				}
			}
			for n := range len(raw) {
				check(raw[:n], "cut to %d bytes", n)
			}
		})
	}
}

// TestCheckpointVersion0StillRead: the files earlier releases wrote, without
// a checksum line, read as before and are noted for rewriting.
func TestCheckpointVersion0StillRead(t *testing.T) {
	for _, tc := range checkpointCases() {
		t.Run(tc.desc, func(t *testing.T) {
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, tc.file), []byte(tc.v0), 0o644); err != nil {
				t.Fatal(err)
			}
			ck := checkpointReader{fs: OSFS{}, dir: dir, legacy: map[string]bool{}}
			got, found, err := tc.read(ck)
			if err != nil || !found || !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("version 0 %q read %v (found %v, error %v), want %v", tc.v0, got, found, err, tc.want)
			}
			if !reflect.DeepEqual(ck.legacy, map[string]bool{tc.file: true}) {
				t.Fatalf("version 0 file not noted for rewriting: %v", ck.legacy)
			}
		})
	}
}

// TestOpenUpgradesVersion0Checkpoints: a log whose four checkpoint files
// an earlier release wrote (version 0) opens with their values, has a
// checkpoint pending although nothing changed, and its next checkpoint
// (by Checkpoint or by Close) rewrites each file in version 1 with the
// same value.
func TestOpenUpgradesVersion0Checkpoints(t *testing.T) {
	files := []string{hwCheckpointFile, logStartOffsetFile, recoveryPointFile, epochCheckpointFile}
	for _, tt := range []struct {
		name       string
		checkpoint func(l *Log) error
	}{
		{"Checkpoint", func(l *Log) error { return l.Checkpoint() }},
		{"Close", func(l *Log) error { return l.Close() }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			opts := smallOptions(t, newClock())
			l := openLog(t, OSFS{}, dir, opts)
			for i := range 12 {
				epoch := int32(1 + i/6)
				if _, _, err := l.AppendLeader(makeBatch(nil, batchSpec{epoch: epoch, payload: 1000}), epoch); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := l.Sync(); err != nil {
				t.Fatal(err)
			}
			if err := l.SetHighWatermark(l.LogEndOffset() - 1); err != nil {
				t.Fatal(err)
			}
			if n, err := l.DeleteBefore(l.HighWatermark()); err != nil || n == 0 {
				t.Fatalf("DeleteBefore: %d segments, %v", n, err)
			}
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			ck := checkpointReader{fs: OSFS{}, dir: dir}
			wantRP, _, err := ck.recoveryPoint()
			if err != nil {
				t.Fatal(err)
			}
			// The same values as an earlier release wrote them: version 0,
			// no checksum line.
			epochs := fmt.Sprintf("0\n%d\n", len(l.EpochEntries()))
			for _, e := range l.EpochEntries() {
				epochs += fmt.Sprintf("%d %d\n", e.Epoch, e.StartOffset)
			}
			v0 := map[string]string{
				hwCheckpointFile:    fmt.Sprintf("0\n%d\n", l.HighWatermark()),
				logStartOffsetFile:  fmt.Sprintf("0\n%d\n", l.LogStartOffset()),
				recoveryPointFile:   fmt.Sprintf("0\n%d %d %d\n", wantRP.offset, wantRP.segmentBase, wantRP.pos),
				epochCheckpointFile: epochs,
			}
			v1 := map[string]string{}
			for _, name := range files {
				raw, err := os.ReadFile(filepath.Join(dir, name))
				if err != nil {
					t.Fatal(err)
				}
				v1[name] = string(raw)
				if err := os.WriteFile(filepath.Join(dir, name), []byte(v0[name]), 0o644); err != nil {
					t.Fatal(err)
				}
			}

			l2 := openLog(t, OSFS{}, dir, opts)
			if l2.LogStartOffset() != l.LogStartOffset() || l2.HighWatermark() != l.HighWatermark() ||
				l2.LogEndOffset() != l.LogEndOffset() || !reflect.DeepEqual(l2.EpochEntries(), l.EpochEntries()) {
				t.Fatalf("reopened from version 0 files: start %d, HW %d, end %d, epochs %v; closed with %d, %d, %d, %v",
					l2.LogStartOffset(), l2.HighWatermark(), l2.LogEndOffset(), l2.EpochEntries(),
					l.LogStartOffset(), l.HighWatermark(), l.LogEndOffset(), l.EpochEntries())
			}
			if l2.openScanned != 0 {
				t.Fatalf("the version 0 recovery point was not used: Open validated %d bytes", l2.openScanned)
			}
			if !l2.CheckpointPending() {
				t.Fatal("no checkpoint pending with version 0 files on disk")
			}
			if err := tt.checkpoint(l2); err != nil {
				t.Fatal(err)
			}
			for _, name := range files {
				raw, err := os.ReadFile(filepath.Join(dir, name))
				if err != nil {
					t.Fatal(err)
				}
				if string(raw) != v1[name] {
					t.Errorf("%s after the checkpoint: %q, want %q", name, raw, v1[name])
				}
			}
			if tt.name == "Checkpoint" {
				if l2.CheckpointPending() {
					t.Fatal("a checkpoint is still pending after the rewrite")
				}
				if err := l2.Close(); err != nil {
					t.Fatal(err)
				}
			}
			if rp, _, err := ck.recoveryPoint(); err != nil || rp != wantRP {
				t.Fatalf("recovery point %v (%v), want %v", rp, err, wantRP)
			}
		})
	}
}
