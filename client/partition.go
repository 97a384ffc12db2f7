package client

// FNV-1a 32-bit parameters (the FNV specification, also hash/fnv).
const (
	fnvOffsetBasis32 = 2166136261
	fnvPrime32       = 16777619
)

// PartitionForKey is the partition of a record with the given non-nil key
// in a topic of the given number of partitions:
//
//	h := uint32(2166136261)
//	for each byte c of key: h = (h ^ uint32(c)) * 16777619
//	partition = h % uint32(partitions)
//
// that is FNV-1a 32-bit of the key bytes, unsigned, modulo the partition
// count. The agent uses the same function for records it receives without a
// partition, so a key goes to the same partition whichever side picks it.
// It panics if partitions is not positive, like a division by zero.
func PartitionForKey(key []byte, partitions int) int {
	if partitions <= 0 || int64(partitions) > 1<<32-1 {
		panic("client: PartitionForKey needs a partition count in [1, 2^32)")
	}
	h := uint32(fnvOffsetBasis32)
	for _, c := range key {
		h ^= uint32(c)
		h *= fnvPrime32
	}
	return int(h % uint32(partitions))
}
