// Package client is the Go client of logagent's client API (docs/design.md §8): the
// HTTP API that the agent on an application's own host serves, by default on
// http://127.0.0.1:7070 (or $LOGAGENT_ADDR).
//
// # Usage
//
//	c, err := client.New("")                       // $LOGAGENT_ADDR or the default
//	defer c.Close(ctx)                             // closes what was made from c
//	err = c.CreateTopic(ctx, client.TopicSpec{Name: "events", Partitions: 3})
//
//	p, err := c.NewProducer()                      // acks=all, idempotent by default
//	res, err := p.Send(ctx, client.Message{Topic: "events", Key: []byte("user-7"), Value: v})
//	// res.Partition, res.Offset, res.Epoch
//	err = p.Close(ctx)                             // flushes what is queued
//
//	cons, err := c.ConsumeTopics(ctx, []string{"events"}, client.OffsetEarliest)
//	for {
//		rec, err := cons.Next(ctx)                 // long-polls every partition
//	}
//
// The examples run as they are written against a cluster of real agents
// in this package's tests.
//
// # Addresses
//
// New takes "host", "host:port", "http://host[:port]" or
// "https://host[:port]"; without a port it is the agent's client port,
// 7070, not HTTP's 80 or HTTPS's 443. An IPv6 host is bracketed:
// "[::1]:7070". A path, query or user is refused (ErrInvalidAddr). An
// empty address is $LOGAGENT_ADDR, or DefaultAddr when that is unset.
//
// # Producing
//
// One Producer writes to any number of topics, each Message naming its
// own (Message.Topic, or WithDefaultTopic for the messages that name
// none), through one buffer (WithMaxBufferedBytes) and one producer id, as
// a Kafka producer does. It accumulates records per topic and partition
// and sends each partition's records as one binary batch when the batch
// reaches WithMaxBatchBytes or has waited WithLinger, on Flush or Close,
// or when a Produce waits for room in the buffer. Records of one
// partition are written in the order they were produced, retries
// included: an idempotent producer (the default) has up to WithMaxInFlight
// requests per partition in flight (5 by default) and the leader's
// sequence check keeps them in order; one that is not idempotent has one
// at a time. The check holds only for a producer id the leader knows: it
// appends a batch of one it does not know (never seen, or forgotten after
// producer.id_expiration passed or as one of the least recently active
// beyond producer.max_per_partition, or known only from batches a
// restarted leader's log no longer holds) at any sequence. So a partition's first
// batch under a producer id, and its first after it was idle (no batch in
// flight or ready to go), goes alone, and the next ones follow once the
// leader has acknowledged it. After an attempt that was not written (a
// refusal, or an unknown outcome: a new leader may not know the producer
// either), the partition's resends and new batches go one at a time,
// oldest first, until the leader acknowledges one.
//
// The partition of a record, within its topic, is, in order:
// Message.Partition when set; else, for a non-nil key,
// PartitionForKey(key, partitions), which is FNV-1a 32-bit of the key
// modulo the number of partitions (an empty key is a key; a nil key is
// none); else the topic's current "sticky" partition, which moves
// round-robin to the next partition each time a batch is closed, so that
// keyless records form full batches yet spread evenly (Kafka's KIP-480).
// The producer reads a topic's partition count (DescribeTopic) at its
// first record without Message.Partition, and again once a minute.
//
// # Guarantees
//
// With acks=all (the default) a successful Result means the record is below
// the partition's high watermark: it is on every in-sync replica and, with
// the agents' default durability, on their disks. acks=1 means the leader
// appended it; acks=0 means the agent received it, and the Result carries no
// offset (Offset and Epoch are -1).
//
// A write fails in one of two ways: it was not written, or its outcome is
// unknown (the error matches ErrOutcomeUnknown), because the agent timed
// out waiting for replicas (504 ack_timeout), refused after the append
// (not_enough_replicas_after_append, not_leader_after_append), answered
// another 5xx or an answer that breaks the API contract, or the connection
// was lost after the request was sent. Refusals before the append
// (not_enough_replicas, leader_not_available, not_leader,
// fenced_leader_epoch, service_unavailable, insufficient_storage,
// timeout_before_write, or a 4xx the agent marks retriable) and connections that could not be made are
// retried, with capped exponential backoff and jitter, until
// WithDeliveryTimeout (2 minutes by default, counted from a batch's first
// attempt); other refusals fail at once.
//
// # Idempotence: exactly-once appends
//
// A Producer is idempotent by default, like Kafka's enable.idempotence:
// at its first send it asks the agent for a producer id (POST /v1/producers,
// or Client.InitProducer), numbers the records it sends to each partition
// (the sequence of a batch's first record travels with the batch), and
// sends every retry of a batch unchanged. The partition's leader appends a
// batch only if its sequence follows the last one it has of the producer,
// and answers a resend of one of the producer's last 5 batches with the
// offsets it already has. So an idempotent producer also retries the writes
// whose outcome is unknown, until the delivery timeout, and each record is
// appended once, in order. Batches that overtook an older batch which was
// not yet written (the leader answers out_of_order_sequence) are sent again
// once it is. What fails:
//
//   - a batch still not written at the delivery timeout, or when Close gives
//     up: its records fail, with ErrOutcomeUnknown if an attempt's outcome
//     was unknown. The batches after it on the partition cannot follow it,
//     so they fail too unless they were written already; the partition then
//     goes on under a new producer id.
//   - out_of_order_sequence that no older batch explains: the batch and every
//     record of the partition not yet written fail with an error that matches
//     ErrOutOfOrderSequence (and ErrOutcomeUnknown for the batch if an earlier
//     attempt's outcome was unknown: that copy may still be written), and the
//     partition goes on under a new producer id.
//   - invalid_producer_epoch: another instance took the producer id over with
//     a newer epoch (Client.ReinitProducer). The producer is fenced: every
//     record not yet written, and every later Produce, fails with an error
//     that matches ErrInvalidProducerEpoch.
//
// "Exactly once" covers appends to the log by one Producer: its retries do
// not duplicate records. It does not cover an application that produces the
// same data again (a restart that resends, a second Producer), and it says
// nothing of consumers: a consumer that processes a record and fails before
// recording its progress processes it again.
//
// Idempotence needs acks=all: WithAcks with less turns it off, and
// WithIdempotence(false) turns it off outright. A producer that is not
// idempotent sends no producer id and never retries a write whose outcome
// is unknown, because the retry could duplicate it: such a record fails
// with an error that matches ErrOutcomeUnknown, and the caller decides
// whether a duplicate is acceptable.
//
// A record's context bounds its delivery while the record is queued: if it
// ends then, the record is withdrawn and fails with the context's error (it
// was not written). A producer that is not idempotent also withdraws it
// between two attempts; an idempotent one sends a batch unchanged once it
// was sent, so its records stay until it is written or fails. If the
// context ends while the record's request is in flight, Send returns an
// error that matches ErrOutcomeUnknown.
//
// # Consuming
//
// A Consumer reads one partition from an offset (OffsetEarliest,
// OffsetLatest or a number); a MultiConsumer (Client.ConsumeTopics, every
// partition of some topics, or Client.ConsumePartitions, the partitions
// given, each from its own offset) reads several, of one topic or several,
// with a goroutine per partition that fetches one answer ahead of Poll;
// a GroupConsumer (below) the partitions its group gives it. Records carry
// their Topic and Partition. Fetches long-poll, ask for binary batches, and
// every batch is verified (CRC-32C and structure) and bounded by the
// FetchLimits before any record is returned: a batch that fails
// verification is an error that matches ErrCorruptBatch. Records below the
// requested offset at the start of the first batch are skipped.
// Reads are idempotent, so a Consumer retries any failure the agent marks
// retriable, and lost connections. Each fetch's records alias that fetch's
// own memory; with WithBufferReuse every fetch reuses the same memory, which
// saves an allocation per fetch for readers done with each record before the
// next fetch.
//
// # Consumer groups
//
// A GroupConsumer (Client.NewGroupConsumer) is a member of a consumer group:
// the agents share the partitions of the group's topics among its members
// (sticky and cooperative: a partition moves only when it must, and is
// given to its new owner only after the old one released it), and keep the
// group's committed offsets. The GroupConsumer joins in a goroutine of its
// own, which then heartbeats until Close: each heartbeat names every
// partition the member still consumes and long-polls for news. When the
// coordinator grants partitions, WithOnAssigned is called and each is
// fetched from the group's committed offset, or where WithResetPolicy says
// when it has none (or it is out of range); where the policy starts a
// partition is its position at once, so a revocation before the first Poll
// commits it and the next owner starts there, not at a later "latest".
// When it asks for partitions back, the consumer stops
// fetching them, commits their positions, calls WithOnRevoked, and only
// then heartbeats without them; a commit that has not succeeded within
// half the session timeout is given up (the heartbeats wait for it), and
// the next owner reads again what was not committed. A member that is fenced or whose session
// ended drops every partition (WithOnRevoked, without a commit, which the
// agent would refuse) and joins again, as a new member unless
// WithMemberID.
//
// Poll returns the records fetched from every owned partition, fairly; the
// records it returns count as consumed. Positions are committed every
// WithAutoCommitInterval (1s by default) by Poll, and by Commit, by a
// revocation and by Close, which then leaves the group so that its
// partitions move at once. A periodic commit, made when Poll is called
// again, covers what the Polls before returned; a revocation, which comes
// while the application may still be processing what the latest Poll
// returned, commits only up to the first of those records (or as far as
// the application committed them itself), so that the partition's next
// owner reads them again. Delivery is at least once: the
// records a member got after its last commit are read again by the
// partition's next owner. A member that could not process what Poll
// returned leaves with CloseWithoutCommit, so that those records are read
// again.
//
// ListGroups, DescribeGroup, CommittedOffsets, ResetOffsets and
// DeleteGroup are the group administration calls.
//
// Every group request carries what is left of its context's deadline
// (the timeout parameter, docs/api.md "Consumer groups"): the agent gives
// the operation up then, so a commit given up on here cannot land after the
// next one and take the committed offset back.
//
// # Moving replicas
//
// MovePartition, Reassignment and CancelMove start, follow and cancel the
// move of a partition's replicas to a new list (docs/design.md §7.6; only
// the partition's leader's agent reports the move's progress, at
// MoveStatus.LeaderAddress); DrainNode, NodeDrain and CancelDrain drain an
// agent of its replicas (§7.7); Rebalance is the plan that evens out the
// agents (§7.8). logagent partition move, node drain and rebalance are
// built on them.
//
// # Closing, stats
//
// Client.Close closes every Producer, MultiConsumer and GroupConsumer made
// from the Client that is still open, waiting for their goroutines, then
// the Client's idle connections; every later call fails with ErrClosed,
// and a Close while another runs waits for it. Each of them also has a
// Close of its own. Client.Stats and Producer.Stats count the records and
// bytes produced and consumed, the failed records and fetches, the
// retries and what is in flight.
//
// # Errors
//
// Errors from the agent are *Error values (status, code, message,
// retriable, Retry-After, and a partition's bounds or leader when the
// agent sends them). Every error code of the API has a sentinel that the
// error matches with errors.Is, wherever it sits in the chain:
// ErrNotLeader, ErrAckTimeout (the outcome is unknown: ErrOutcomeUnknown
// matches too), ErrRequestTooLarge, ErrUnknownTopic, and so on.
package client
