package producer

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"slices"

	"github.com/logagent/logagent/record"
)

// Snapshot layout, big-endian. A snapshot is the whole state as of a log end
// offset: recovery restores it and Applies the log's batches from that
// offset on.
//
//	off size field            notes
//	0   4    magic            "LGPS"
//	4   2    version          uint16, 1
//	6   8    end_offset       int64 >= 0, log end offset the state is as of
//	14  4    producer_count   uint32, bounded by the bytes that follow
//	18  ...  producers        producer_count of them, ascending producer_id
//	end-4 4  crc              uint32, CRC-32C (Castagnoli) of bytes [0, end-4)
//
// A producer (31 bytes plus its batches):
//
//	0   8    producer_id      int64 >= 0
//	8   2    producer_epoch   int16 >= 0
//	10  4    next_sequence    int32 >= 0, base sequence of its next batch:
//	                          after the last batch's last sequence; with no
//	                          batch, that of the oldest one truncated
//	14  8    last_offset      int64, the last batch's last_offset; with no
//	                          batch, in [-1, end_offset), below the
//	                          truncation that removed them
//	22  8    last_timestamp   int64 ms, the last batch's max_timestamp (with
//	                          no batch, that of the last one truncated)
//	30  1    batch_count      uint8, 0..5 (NumBatchesToRetain)
//	31  ...  batches          batch_count of them, oldest first
//
// A batch (36 bytes), of the producer's epoch, below end_offset, each after
// the one before it:
//
//	0   4    base_sequence    int32 >= 0
//	4   4    record_count     int32 >= 1
//	8   8    base_offset      int64 >= 0
//	16  8    last_offset      int64 >= base_offset + record_count - 1
//	24  4    leader_epoch     int32
//	28  8    max_timestamp    int64 ms
const (
	snapshotMagic   = "LGPS"
	snapshotVersion = 1

	snapshotHeaderSize = 18
	snapshotCRCSize    = 4
	producerFixedSize  = 31
	batchSize          = 36
)

// ErrCorruptSnapshot is matched (errors.Is) by every error UnmarshalSnapshot
// returns: the bytes are not a whole snapshot this package wrote (truncated,
// damaged, another format or version). The caller then rebuilds the state by
// Applying the log from its start.
var ErrCorruptSnapshot = errors.New("producer: corrupt snapshot")

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// MarshalSnapshot appends to dst the snapshot of the state as of log end
// offset endOffset, which the caller knows (batches of producers that are not
// idempotent do not pass through the state). Producers are written in
// ascending id order, so the same state always gives the same bytes.
//
// An endOffset below a batch applied is ErrInvalidInput: the snapshot would
// describe a log the one it is stored with does not hold.
func (s *State) MarshalSnapshot(dst []byte, endOffset int64) ([]byte, error) {
	if endOffset < s.end {
		return dst, fmt.Errorf("%w: snapshot end offset %d is below the end %d of the batches applied", ErrInvalidInput, endOffset, s.end)
	}
	ids := make([]int64, 0, len(s.producers))
	size := snapshotHeaderSize + snapshotCRCSize
	for pid, e := range s.producers {
		ids = append(ids, pid)
		size += producerFixedSize + len(e.batches)*batchSize
	}
	slices.Sort(ids)

	start := len(dst)
	dst = slices.Grow(dst, size)
	dst = append(dst, snapshotMagic...)
	dst = binary.BigEndian.AppendUint16(dst, snapshotVersion)
	dst = binary.BigEndian.AppendUint64(dst, uint64(endOffset))
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(ids)))
	for _, pid := range ids {
		e := s.producers[pid]
		dst = binary.BigEndian.AppendUint64(dst, uint64(pid))
		dst = binary.BigEndian.AppendUint16(dst, uint16(e.epoch))
		dst = binary.BigEndian.AppendUint32(dst, uint32(e.next))
		dst = binary.BigEndian.AppendUint64(dst, uint64(e.lastOffset))
		dst = binary.BigEndian.AppendUint64(dst, uint64(e.lastTimestamp))
		dst = append(dst, byte(len(e.batches)))
		for _, b := range e.batches {
			dst = binary.BigEndian.AppendUint32(dst, uint32(b.BaseSequence))
			dst = binary.BigEndian.AppendUint32(dst, uint32(b.RecordCount))
			dst = binary.BigEndian.AppendUint64(dst, uint64(b.BaseOffset))
			dst = binary.BigEndian.AppendUint64(dst, uint64(b.LastOffset))
			dst = binary.BigEndian.AppendUint32(dst, uint32(b.LeaderEpoch))
			dst = binary.BigEndian.AppendUint64(dst, uint64(b.MaxTimestamp))
		}
	}
	return binary.BigEndian.AppendUint32(dst, crc32.Checksum(dst[start:], castagnoli)), nil
}

// UnmarshalSnapshot reads a snapshot MarshalSnapshot wrote and returns the
// state and the log end offset it is as of. Nothing in b is trusted: the
// magic, version and CRC are checked, every count is bounded by the bytes
// left, and every field must hold a value the state can have; anything else
// is ErrCorruptSnapshot, never a panic or an allocation beyond len(b).
func UnmarshalSnapshot(b []byte, opts Options) (*State, int64, error) {
	if len(b) < snapshotHeaderSize+snapshotCRCSize {
		return nil, 0, corruptf("%d bytes, the smallest snapshot has %d", len(b), snapshotHeaderSize+snapshotCRCSize)
	}
	if string(b[:4]) != snapshotMagic {
		return nil, 0, corruptf("magic %q", b[:4])
	}
	if v := binary.BigEndian.Uint16(b[4:]); v != snapshotVersion {
		return nil, 0, corruptf("unknown version %d", v)
	}
	body, sum := b[:len(b)-snapshotCRCSize], binary.BigEndian.Uint32(b[len(b)-snapshotCRCSize:])
	if got := crc32.Checksum(body, castagnoli); got != sum {
		return nil, 0, corruptf("crc mismatch: stored %08x, computed %08x", sum, got)
	}
	end := int64(binary.BigEndian.Uint64(b[6:]))
	if end < 0 {
		return nil, 0, corruptf("negative end offset %d", end)
	}
	count := binary.BigEndian.Uint32(b[14:])
	r := body[snapshotHeaderSize:]
	if uint64(count) > uint64(len(r)/producerFixedSize) {
		return nil, 0, corruptf("%d producers cannot fit in %d bytes", count, len(r))
	}
	s := New(opts)
	s.end = end
	prev := int64(-1)
	for i := range count {
		if len(r) < producerFixedSize {
			return nil, 0, corruptf("producer %d of %d: %d bytes left, need %d", i, count, len(r), producerFixedSize)
		}
		pid := int64(binary.BigEndian.Uint64(r))
		e := &entry{
			epoch:         int16(binary.BigEndian.Uint16(r[8:])),
			next:          int32(binary.BigEndian.Uint32(r[10:])),
			lastOffset:    int64(binary.BigEndian.Uint64(r[14:])),
			lastTimestamp: int64(binary.BigEndian.Uint64(r[22:])),
		}
		n := int(r[30])
		r = r[producerFixedSize:]
		if pid <= prev {
			return nil, 0, corruptf("producer id %d after %d: ids must be ascending and not negative", pid, prev)
		}
		prev = pid
		if e.epoch < 0 || e.next < 0 {
			return nil, 0, corruptf("producer %d: negative epoch %d or next sequence %d", pid, e.epoch, e.next)
		}
		if n > NumBatchesToRetain {
			return nil, 0, corruptf("producer %d: %d batches, at most %d are retained", pid, n, NumBatchesToRetain)
		}
		if len(r) < n*batchSize {
			return nil, 0, corruptf("producer %d: %d batches need %d bytes, %d left", pid, n, n*batchSize, len(r))
		}
		if n > 0 {
			e.batches = make([]Batch, 0, n)
		}
		for range n {
			bt := Batch{
				ProducerID:    pid,
				ProducerEpoch: e.epoch,
				BaseSequence:  int32(binary.BigEndian.Uint32(r)),
				RecordCount:   int32(binary.BigEndian.Uint32(r[4:])),
				BaseOffset:    int64(binary.BigEndian.Uint64(r[8:])),
				LastOffset:    int64(binary.BigEndian.Uint64(r[16:])),
				LeaderEpoch:   int32(binary.BigEndian.Uint32(r[24:])),
				MaxTimestamp:  int64(binary.BigEndian.Uint64(r[28:])),
			}
			r = r[batchSize:]
			if err := checkBatch(bt); err != nil {
				return nil, 0, corruptf("producer %d: %v", pid, err)
			}
			if k := len(e.batches); k > 0 && bt.BaseOffset <= e.batches[k-1].LastOffset {
				return nil, 0, corruptf("producer %d: batch at offset %d after one ending at %d", pid, bt.BaseOffset, e.batches[k-1].LastOffset)
			}
			if bt.LastOffset >= end {
				return nil, 0, corruptf("producer %d: batch ending at offset %d, at or past the end offset %d", pid, bt.LastOffset, end)
			}
			e.batches = append(e.batches, bt)
		}
		if n > 0 {
			last := e.batches[n-1]
			if e.next != record.AddSequence(last.LastSequence(), int(1)) || e.lastOffset != last.LastOffset || e.lastTimestamp != last.MaxTimestamp {
				return nil, 0, corruptf("producer %d: next sequence %d, last offset %d and timestamp %d do not follow its last batch (%d, %d, %d)",
					pid, e.next, e.lastOffset, e.lastTimestamp, record.AddSequence(last.LastSequence(), int(1)), last.LastOffset, last.MaxTimestamp)
			}
		} else if e.lastOffset < -1 || e.lastOffset >= end {
			return nil, 0, corruptf("producer %d: last offset %d outside [-1, %d)", pid, e.lastOffset, end)
		}
		s.producers[pid] = e
	}
	if len(r) != 0 {
		return nil, 0, corruptf("%d bytes after the last producer", len(r))
	}
	return s, end, nil
}

func corruptf(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrCorruptSnapshot, fmt.Sprintf(format, args...))
}
