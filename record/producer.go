package record

import (
	"encoding/binary"
	"math"
)

// NoProducerID is the producer_id of a batch written without idempotence,
// and NoSequence its base_sequence.
const (
	NoProducerID int64 = -1
	NoSequence   int32 = -1
)

// AddSequence is seq advanced by n >= 0 records: an idempotent producer's
// sequences live in [0, 2^31) and wrap from math.MaxInt32 to 0, as Kafka's
// do. The sequence after a batch of count records at base is
// AddSequence(base, count); the batch's last record's, AddSequence(base,
// count-1).
func AddSequence(seq int32, n int) int32 {
	return int32((int64(seq) + int64(n)) % (math.MaxInt32 + 1))
}

// StampProducer rewrites the producer fields of a whole, validated batch in
// place and computes its CRC again (the fields are covered by it): the
// sidecar makes a plain batch idempotent this way before it forwards it.
func StampProducer(batch []byte, id int64, epoch int16, baseSequence int32) {
	binary.BigEndian.PutUint64(batch[offProducerID:], uint64(id))
	binary.BigEndian.PutUint16(batch[offProducerEpoch:], uint16(epoch))
	binary.BigEndian.PutUint32(batch[offBaseSequence:], uint32(baseSequence))
	binary.BigEndian.PutUint32(batch[offCRC:], Checksum(batch))
}
