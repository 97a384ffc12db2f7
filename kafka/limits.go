package kafka

import (
	"errors"
	"fmt"
	"reflect"
)

// A request frame decodes (kmsg builds a Go struct per array element, and
// an array's length is checked only against the bytes left) and is handled
// (a response element, often a Broker call, per request element) into many
// times its size: before these limits a 1 MiB Metadata frame of 18-byte
// topic ids took 40 MB of heap, a 1 MiB DescribeGroups of empty group ids
// 610 MB (TestCraftedRequestHeap). Two bounds keep one request's heap under
// about 220 MiB (measured: a JoinGroup at its 12 MiB limit; 94 MiB or less
// for the keys of defaultFrameBytes): a frame limit per API key, checked
// before the frame is read, which bounds the decoding, and maxRequestItems,
// checked on the decoded request before it is handled, which bounds the
// handling.
//
// The frame limits are sized from what a client sends for 10,000 partitions
// (the most the project has run, docs/benchmarks.md) in 10,000 topics with
// 249-byte names, Kafka's longest, encoded with kmsg (kadm and kgo send
// such requests in TestTenThousandPartitionsServed): 2.5-3.7 MB for Metadata, ListOffsets, Fetch,
// OffsetCommit, OffsetFetch, OffsetForLeaderEpoch, CreateTopics (four
// configs each), DescribeConfigs; a JoinGroup of two protocols (the Java
// consumer's default, range and cooperative-sticky) each subscribing to the
// 10,000 topics and owning their partitions, 10.2 MB. Only Produce carries
// records, and keeps Config.MaxRequestBytes. Kafka has one limit for every
// key (socket.request.max.bytes); each of these is also at most
// Config.MaxRequestBytes.
const (
	// defaultFrameBytes is the limit of every key but those below, and of
	// a key the listener does not serve (refused once read).
	defaultFrameBytes = 4 << 20
	// offsetCommitFrameBytes leaves room for each partition's metadata
	// string (about 500 bytes each for 10,000 partitions).
	offsetCommitFrameBytes = 8 << 20
	// groupFrameBytes is JoinGroup's and SyncGroup's: a member's
	// subscription per protocol, every member's assignment.
	groupFrameBytes = 12 << 20
)

// maxRequestItems bounds the elements of a decoded request's arrays (its
// topics, partitions, groups, keys, ...; not its bytes), ten times the
// 10,000 partitions of the frame limits: the handlers take up to about
// 2 KB of heap per element (CreatePartitions naming one topic again and
// again: 195 MiB for 100,000), most of them under 500 bytes.
const maxRequestItems = 100_000

// ErrRequestItems is a request whose arrays hold more than maxRequestItems
// elements: the connection is closed without handling it.
var ErrRequestItems = errors.New("kafka: too many items in request")

// frameLimit is the largest frame of a request of key.
func (s *Server) frameLimit(key int16) int32 {
	limit := int32(defaultFrameBytes)
	if a, ok := s.apis[key]; ok {
		limit = a.maxBytes
	}
	if limit == 0 || limit > s.cfg.MaxRequestBytes {
		return s.cfg.MaxRequestBytes
	}
	return limit
}

// checkItems refuses a request whose arrays hold more than maxRequestItems
// elements in all.
func checkItems(req any) error {
	if n := countItems(reflect.ValueOf(req), 0); n > maxRequestItems {
		return fmt.Errorf("%w: more than %d", ErrRequestItems, maxRequestItems)
	}
	return nil
}

// countItems adds the elements of v's slices, nested ones included, to n,
// and stops once past maxRequestItems. A []byte is one value (records, a
// member's metadata), not items; maps (kmsg's unknown tags) are not
// counted, they are bounded by the frame.
func countItems(v reflect.Value, n int) int {
	switch v.Kind() {
	case reflect.Pointer, reflect.Interface:
		if !v.IsNil() {
			n = countItems(v.Elem(), n)
		}
	case reflect.Struct:
		for i := 0; i < v.NumField() && n <= maxRequestItems; i++ {
			n = countItems(v.Field(i), n)
		}
	case reflect.Slice:
		if v.Type().Elem().Kind() == reflect.Uint8 {
			return n
		}
		n += v.Len()
		switch v.Type().Elem().Kind() {
		case reflect.Struct, reflect.Slice, reflect.Pointer:
			for i := 0; i < v.Len() && n <= maxRequestItems; i++ {
				n = countItems(v.Index(i), n)
			}
		}
	}
	return n
}
