package record

import "encoding/binary"

// NoProducerID is the producer_id of a batch written without idempotence,
// and NoSequence its base_sequence.
const (
	NoProducerID int64 = -1
	NoSequence   int32 = -1
)

// StampProducer rewrites the producer fields of a whole, validated batch in
// place and computes its CRC again (the fields are covered by it): the
// sidecar makes a plain batch idempotent this way before it forwards it.
func StampProducer(batch []byte, id int64, epoch int16, baseSequence int32) {
	binary.BigEndian.PutUint64(batch[offProducerID:], uint64(id))
	binary.BigEndian.PutUint16(batch[offProducerEpoch:], uint16(epoch))
	binary.BigEndian.PutUint32(batch[offBaseSequence:], uint32(baseSequence))
	binary.BigEndian.PutUint32(batch[offCRC:], Checksum(batch))
}
