package record

import "fmt"

// NextBatch takes the batch at the start of region (batches back to back, as
// in a segment file or a fetch response), verifies it (header and CRC, not
// the records; see Decoder) and returns it and the bytes after it. batch has
// its capacity cut to its length, so appending to it cannot overwrite rest.
//
// A region that ends inside the batch, or is empty, gives ErrShort: at the
// end of a log that is a torn write. Anything else wrong is ErrCorrupt.
func NextBatch(region []byte, maxBatchBytes int) (batch, rest []byte, err error) {
	h, size, err := parseHeader(region, maxBatchBytes)
	if err != nil {
		return nil, region, err
	}
	if len(region) < size {
		return nil, region, fmt.Errorf("%w: have %d of %d bytes", ErrShort, len(region), size)
	}
	batch = region[:size:size]
	if err := checkBatch(h, batch); err != nil {
		return nil, region, err
	}
	return batch, region[size:], nil
}

// SplitBatches splits region into verified batches with NextBatch. On error
// it also returns the batches before the bad one, so that the caller knows
// the valid prefix; the error says at which byte the bad batch starts and
// matches ErrShort or ErrCorrupt as NextBatch's does. An empty region holds
// no batches and is not an error.
func SplitBatches(region []byte, maxBatchBytes int) ([][]byte, error) {
	var batches [][]byte
	for pos := 0; pos < len(region); {
		batch, _, err := NextBatch(region[pos:], maxBatchBytes)
		if err != nil {
			return batches, fmt.Errorf("record: batch at byte %d: %w", pos, err)
		}
		batches = append(batches, batch)
		pos += len(batch)
	}
	return batches, nil
}
