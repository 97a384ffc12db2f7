package producer

import (
	"bytes"
	"errors"
	"testing"
)

// FuzzUnmarshalSnapshot reads arbitrary bytes as a snapshot, twice: as they
// are, and with the CRC rewritten to match, so that mutations get past the
// CRC into the fields. Whatever is refused must be ErrCorruptSnapshot;
// whatever is accepted must be a state this package can hold: it writes
// back the same bytes, and it keeps working.
func FuzzUnmarshalSnapshot(f *testing.F) {
	s, end := sampleState(f)
	f.Add(snapshot(f, s, end))
	f.Add(snapshot(f, New(Options{}), 0))
	s = New(Options{})
	mustApply(f, s, run(1, 3, 10, 0, 2, 3)...)
	mustApply(f, s, run(2, 0, 0, 5, 1, 1)...)
	s.TruncateTo(5)
	f.Add(snapshot(f, s, 8))
	f.Add([]byte{})
	f.Add([]byte(snapshotMagic))
	f.Fuzz(func(t *testing.T, data []byte) {
		checkSnapshot(t, data)
		if len(data) >= snapshotHeaderSize+snapshotCRCSize {
			b := bytes.Clone(data)
			resum(b)
			checkSnapshot(t, b)
		}
	})
}

func checkSnapshot(t *testing.T, data []byte) {
	s, end, err := UnmarshalSnapshot(data, Options{})
	if err != nil {
		if !errors.Is(err, ErrCorruptSnapshot) || s != nil {
			t.Fatalf("UnmarshalSnapshot = %v, %v: a refusal is ErrCorruptSnapshot and no state", s, err)
		}
		return
	}
	again, err := s.MarshalSnapshot(nil, end)
	if err != nil {
		t.Fatalf("a restored state cannot write its snapshot: %v", err)
	}
	if !bytes.Equal(again, data) {
		t.Fatal("a restored state writes other bytes than it was read from")
	}
	for pid := range int64(4) {
		s.Check(pid, 0, 0, 1)
	}
	s.TruncateTo(end / 2)
	if end/2 < end {
		if err := s.Apply(Batch{ProducerID: 1, RecordCount: 1, BaseOffset: end / 2, LastOffset: end / 2}); err != nil {
			t.Fatalf("Apply at the truncation point of a restored state: %v", err)
		}
	}
	if _, err := s.MarshalSnapshot(nil, end); err != nil {
		t.Fatalf("MarshalSnapshot after TruncateTo and Apply: %v", err)
	}
}
