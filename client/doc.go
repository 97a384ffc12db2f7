// Package client is the Go client of logagent's client API (docs/design.md §8): the
// HTTP API that the agent on an application's own host serves, by default on
// http://127.0.0.1:7070 (or $LOGAGENT_ADDR).
//
// # Usage
//
//	c, err := client.New("")                       // $LOGAGENT_ADDR or the default
//	err = c.CreateTopic(ctx, client.TopicSpec{Name: "events", Partitions: 3})
//
//	p, err := c.NewProducer("events")              // acks=all by default
//	res, err := p.Send(ctx, client.Message{Key: []byte("user-7"), Value: v})
//	// res.Partition, res.Offset, res.Epoch
//	err = p.Close(ctx)                             // flushes what is queued
//
//	cons, err := c.NewConsumer("events", 0, client.OffsetEarliest)
//	for {
//		rec, err := cons.Next(ctx)                 // long-polls for new records
//	}
//
// # Producing
//
// A Producer accumulates records per partition and sends each partition's
// records as one binary batch (record.Builder) when the batch reaches
// WithMaxBatchBytes or has waited WithLinger, or on Flush or Close. One
// request per partition is in flight at a time, so records of one partition
// are written in the order they were produced, retries included.
//
// The partition of a record is, in order: Message.Partition when set; else,
// for a non-nil key, PartitionForKey(key, partitions), which is FNV-1a 32-bit
// of the key modulo the number of partitions (an empty key is a key; a nil
// key is none); else the producer's current "sticky" partition, which moves
// round-robin to the next partition each time a batch is closed, so that
// keyless records form full batches yet spread evenly (Kafka's KIP-480).
//
// # Guarantees
//
// With acks=all (the default) a successful Result means the record is below
// the partition's high watermark: it is on every in-sync replica and, with
// the agents' default durability, on their disks. acks=1 means the leader
// appended it; acks=0 means the agent received it, and the Result carries no
// offset (Offset and Epoch are -1).
//
// A failed write is retried, with capped exponential backoff and jitter, only
// when it is known that nothing was written: the connection could not be made
// or the request was not sent, or the agent refused before appending
// (not_enough_replicas, leader_not_available, not_leader,
// fenced_leader_epoch, service_unavailable, insufficient_storage, or a 4xx
// the agent marks retriable). A write whose outcome is unknown is never retried, because the
// retry could duplicate it: an ack timeout (504 ack_timeout), a refusal after
// the append (not_enough_replicas_after_append, not_leader_after_append), any
// other 5xx, a connection lost after the request was sent, or an answer that
// breaks the API contract. Such a record fails with an error that matches
// ErrOutcomeUnknown: the caller decides whether a duplicate is acceptable.
//
// A record's context bounds its delivery. If it ends while the record is
// still queued, or between two attempts, the record is withdrawn and fails
// with the context's error: it was not written. If it ends while the record's
// request is in flight, Send returns an error that matches ErrOutcomeUnknown.
//
// # Consuming
//
// A Consumer reads one partition from an offset (OffsetEarliest,
// OffsetLatest or a number). Fetches long-poll, ask for binary batches, and
// every batch is verified (CRC-32C and structure, with record.Decoder) and
// bounded by configured limits before any record is returned: a batch that
// fails verification is an error that matches record.ErrCorrupt. Records
// below the requested offset at the start of the first batch are skipped.
// Reads are idempotent, so a Consumer retries any failure the agent marks
// retriable, and lost connections. Each fetch's records alias that fetch's
// own memory; with WithBufferReuse every fetch reuses the same memory, which
// saves an allocation per fetch for readers done with each record before the
// next fetch.
//
// Errors from the agent are *Error values (status, code, message,
// retriable, Retry-After); the common codes also match sentinels such as
// ErrUnknownTopic with errors.Is.
package client
