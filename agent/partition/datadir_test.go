package partition

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/logagent/logagent/segstore"
)

// TestDataDirLostPageCache: a start that follows a reboot without a clean
// stop is told its page cache is gone, and MarkAllDataLoss records it in
// every partition before the new boot id is stored; a clean stop, the same
// boot, or a first start are not.
func TestDataDirLostPageCache(t *testing.T) {
	current, err := os.ReadFile(bootIDPath)
	if err != nil {
		t.Fatalf("this test needs %s: %v", bootIDPath, err)
	}
	tests := []struct {
		name     string
		prevBoot string // "" writes no boot_id file
		clean    bool
		want     bool
	}{
		{"rebooted, unclean", "11111111-2222-3333-4444-555555555555", false, true},
		{"rebooted, clean stop", "11111111-2222-3333-4444-555555555555", true, false},
		{"same boot, unclean", string(current), false, false},
		{"no earlier boot id", "", false, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			d, err := OpenDataDir(segstore.OSFS{}, dir, "n1")
			if err != nil {
				t.Fatal(err)
			}
			part := filepath.Join(dir, "orders-0")
			if err := os.MkdirAll(part, 0o750); err != nil {
				t.Fatal(err)
			}
			if err := writeReplicaFile(segstore.OSFS{}, part, replicaFile{Topic: "orders", Partition: 0, TopicID: "id"}); err != nil {
				t.Fatal(err)
			}
			if tc.clean {
				if err := d.MarkCleanShutdown(); err != nil {
					t.Fatal(err)
				}
			}
			if err := d.Close(); err != nil {
				t.Fatal(err)
			}
			boot := filepath.Join(dir, bootIDFileName)
			if tc.prevBoot != "" {
				writeTestFile(t, boot, tc.prevBoot)
			} else {
				os.Remove(boot)
			}

			d, err = OpenDataDir(segstore.OSFS{}, dir, "n1")
			if err != nil {
				t.Fatal(err)
			}
			defer d.Close()
			if d.LostPageCache != tc.want {
				t.Fatalf("LostPageCache %t, want %t", d.LostPageCache, tc.want)
			}
			if !tc.want {
				return
			}
			if n, err := d.MarkAllDataLoss(); err != nil || n != 1 {
				t.Fatalf("MarkAllDataLoss = %d, %v; want 1 partition", n, err)
			}
			if f, _, err := readReplicaFile(segstore.OSFS{}, part); err != nil || !f.DataLoss {
				t.Fatalf("replica file %+v, %v: want data_loss", f, err)
			}
			if err := d.RecordBoot(false); err != nil {
				t.Fatal(err)
			}
			if b, _ := os.ReadFile(boot); string(b) != string(current) {
				t.Fatalf("boot_id %q after RecordBoot, want the current %q", b, current)
			}
		})
	}
}

// TestDataDirFormat: a data directory written by the build before Kafka's
// batch format (format 1, magic 1 batches) is refused at start, saying so,
// and so is one from a newer build; the current format opens.
func TestDataDirFormat(t *testing.T) {
	tests := []struct {
		format    int
		olderErr  bool
		wantError string
	}{
		{format: 1, olderErr: true, wantError: "format 1"},
		{format: dataDirFormat + 1, wantError: "newer logagent"},
		{format: dataDirFormat},
	}
	for _, tc := range tests {
		t.Run(strconv.Itoa(tc.format), func(t *testing.T) {
			dir := t.TempDir()
			meta := fmt.Sprintf(`{"node_id":"n1","format":%d}`+"\n", tc.format)
			if err := os.WriteFile(filepath.Join(dir, metaFileName), []byte(meta), 0o640); err != nil {
				t.Fatal(err)
			}
			d, err := OpenDataDir(segstore.OSFS{}, dir, "n1")
			if tc.wantError == "" {
				if err != nil {
					t.Fatalf("format %d refused: %v", tc.format, err)
				}
				d.Close()
				return
			}
			if err == nil {
				d.Close()
				t.Fatalf("format %d opened", tc.format)
			}
			if errors.Is(err, ErrOlderFormat) != tc.olderErr || !strings.Contains(err.Error(), tc.wantError) {
				t.Fatalf("format %d: error %q (older format: %v), want one containing %q (older format: %v)", tc.format, err, errors.Is(err, ErrOlderFormat), tc.wantError, tc.olderErr)
			}
			t.Logf("format %d: %v", tc.format, err)
		})
	}
}

func writeTestFile(t *testing.T, path, body string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestDataDirFaults: the data directory's own files go through the agent's
// FS, so a disk that refuses them is seen: a first start that cannot
// write meta.json fails and releases the lock; a stop that cannot write
// clean_shutdown reports it, and the next start does not take the stop
// for a clean one.
func TestDataDirFaults(t *testing.T) {
	full := func(op segstore.FaultOp, path string) segstore.Fault {
		return segstore.Fault{Op: op, Path: path, Sticky: true, Err: syscall.ENOSPC}
	}
	tests := []struct {
		name  string
		fault segstore.Fault
		// atStop: the fault is injected after the open, and hits the
		// clean stop's marker; else it hits the first open.
		atStop bool
	}{
		{name: "meta.json not created", fault: full(segstore.OpCreate, metaFileName+".tmp")},
		{name: "meta.json not synced", fault: full(segstore.OpSync, metaFileName+".tmp")},
		{name: "clean_shutdown not created", fault: full(segstore.OpCreate, cleanShutdownFileName), atStop: true},
		{name: "clean_shutdown not renamed", fault: full(segstore.OpRename, cleanShutdownFileName), atStop: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			fsys, err := segstore.NewFaultFS(dir)
			if err != nil {
				t.Fatal(err)
			}
			if !tc.atStop {
				fsys.Inject(tc.fault)
			}
			d, err := OpenDataDir(fsys, dir, "n1")
			if !tc.atStop {
				if !errors.Is(err, syscall.ENOSPC) {
					t.Fatalf("open on a full disk: %v, want ENOSPC", err)
				}
				fsys.Clear()
				// The failed open released the lock: a second try
				// gets it.
				d, err = OpenDataDir(fsys, dir, "n1")
				if err != nil {
					t.Fatalf("open after the disk has room again: %v", err)
				}
				d.Close()
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			fsys.Inject(tc.fault)
			if err := d.MarkCleanShutdown(); !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("clean stop on a full disk: %v, want ENOSPC", err)
			}
			d.Close()
			fsys.Clear()
			d, err = OpenDataDir(fsys, dir, "n1")
			if err != nil {
				t.Fatal(err)
			}
			defer d.Close()
			if d.CleanShutdown {
				t.Error("a stop whose clean_shutdown was never written counted as clean")
			}
		})
	}
}

// TestWriteFileAtomicLeavesNoTemporary: a write refused for space (the
// producer snapshot, replica.json) removes its temporary file, which held
// its space on the full disk until the next write of the file.
func TestWriteFileAtomicLeavesNoTemporary(t *testing.T) {
	root := t.TempDir()
	fsys, err := segstore.NewFaultFS(root)
	if err != nil {
		t.Fatal(err)
	}
	name := filepath.Join(root, "producers.snapshot")
	fsys.Inject(segstore.Fault{Op: segstore.OpWrite, Path: "producers.snapshot.tmp", Err: syscall.ENOSPC, Partial: true})
	if err := writeFileAtomic(fsys, name, make([]byte, 64<<10)); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("write on a full disk: %v, want ENOSPC", err)
	}
	if _, err := os.Stat(name + ".tmp"); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("temporary file after the refused write: %v, want none", err)
	}
}
