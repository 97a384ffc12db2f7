package segstore

import (
	"os"
	"syscall"
	"testing"
	"unsafe"
)

// TestActiveIndexFaultReadsOnePage: the first entry written into a new
// active index brings one page of the file into the page cache, not a
// read-ahead window of the hole behind it (the device's read_ahead_kb:
// 8 MiB on the virtio disk where every new partition's first write
// zero-filled that much, docs/benchmarks.md). Without MADV_RANDOM on the
// mapping this fails on any device whose read-ahead is over a page.
func TestActiveIndexFaultReadsOnePage(t *testing.T) {
	clock := newClock()
	dir := t.TempDir()
	opts := smallOptions(t, clock)
	opts.SegmentBytes = 64 << 20
	opts.IndexBytes = 16 << 20
	opts.IndexIntervalBytes = 1
	l := openLog(t, OSFS{}, dir, opts)
	defer l.Close()

	// The first batch of a segment needs no entry (position 0); the
	// second gets the first.
	for range 2 {
		if _, _, err := l.AppendLeader(makeBatch(nil, batchSpec{epoch: 1, records: 1, payload: 100}), 1); err != nil {
			t.Fatal(err)
		}
	}
	ix := l.active.index
	if ix.entries() != 1 || len(ix.data) != opts.IndexBytes {
		t.Fatalf("active index: %d entries mapped over %d bytes; want 1 over %d", ix.entries(), len(ix.data), opts.IndexBytes)
	}
	pages := len(ix.data) / os.Getpagesize()
	resident := make([]byte, pages)
	if _, _, errno := syscall.Syscall(syscall.SYS_MINCORE, uintptr(unsafe.Pointer(&ix.data[0])), uintptr(len(ix.data)), uintptr(unsafe.Pointer(&resident[0]))); errno != 0 {
		t.Fatalf("mincore: %v", errno)
	}
	cached := 0
	for _, r := range resident {
		cached += int(r & 1)
	}
	if cached != 1 {
		t.Fatalf("%d of the active index's %d pages are in the page cache after its first entry; want 1 (no read-ahead)", cached, pages)
	}
}
