// Package replicate is the ISR replication protocol of one partition as two
// deterministic state machines (docs/design.md §7): Leader, for the replica that
// leads an epoch, and Follower, for a replica following it. They do no I/O,
// start no goroutines and read no clock: the caller (the agent's partition
// loop) feeds them inputs one at a time, with the time as a value, and
// carries out what they decide. Kafka's semantics are copied on purpose:
// the high watermark over the maximal ISR (KAFKA-15583), lastCaughtUpTime,
// epoch-based truncation (KIP-101, KIP-279) done on the diverging epochs of
// fetch answers (KIP-320, as Kafka's followers truncate since 2.7).
//
// # Leader
//
//	inputs                                     outputs
//	CanAppend(acks) ─────────────────────────► nil | ErrNotEnoughReplicas | ErrNotLeader
//	Fetch(req, now) ─────────┐  ┌────────┐ ──► FetchResult (HW, log end, diverging epoch)
//	OffsetForEpoch(req) ─────┤  │        │ ──► EpochEndOffset
//	Appended(last, now) ─────┤  │        │
//	Synced(last) ────────────┼─►│ Leader │     Ready() LeaderReady:
//	WaitAck(id, last, acks) ─┤  │        │ ──►   HighWatermark  checkpoint it, publish it
//	Tick(now) ───────────────┤  │        │ ──►   ISRProposal    write it with the guarded txn
//	SetDeadFollowers(ids) ───┤  │        │
//	ISRCommitted(isr, elr) ──┤  └────────┘ ──►   Acks           answer the producers
//	ISRProposalFailed() ─────┤
//	Resign() ────────────────┘
//
// The HW is the minimum log end offset over the maximal ISR (the committed
// ISR plus a pending addition), counting the leader's own records only once
// fsynced in fsync mode. It only grows, and it does not grow while the
// committed ISR is smaller than min_insync_replicas. Tick proposes removing
// followers that have not caught up within LagTimeMax, and SetDeadFollowers
// (or the next Tick) those Consul says are dead, at once; the HW waits for
// them until ISRCommitted confirms. A fetch proposes adding a follower that
// is not dead and whose log reached the HW and the start of the leader's
// epoch; it counts for the HW at once. One proposal is in flight at a time.
//
// # Follower
//
//	NewFollower ──► fetch ─── Fetch ───► leader: Fetch
//	          ┌───►   │ Appended, Synced, then FetchResponded,
//	          │       │ FetchOutOfRange or FetchFailed
//	          │       ▼ a diverging epoch or an out-of-range answer
//	          └─── truncate ─── Truncate ───► log; Truncated
//
// A new follower never truncates to its own HW. Its every fetch names the
// latest epoch of its log (last fetched epoch) with its log end as the fetch
// offset; the leader, before it counts the offset, answers with where that
// epoch (or its largest one below) ends in its own log when the follower's
// log cannot be a prefix of its own. The follower truncates to min(leader's
// end, own end) for the epoch the leader answered; if it never had that
// epoch, it cuts after its own largest epoch below it, and its next fetch
// names that one. Leader.OffsetForEpoch still answers the same question on
// its own (Kafka's OffsetsForLeaderEpoch) for Kafka clients and for
// followers of older agents. The follower's HW is
// min(leader HW, own log end), counting only fsynced records in fsync mode;
// in that mode the next fetch waits for the fsync, so the fetch offset the
// leader counts is always durable. Unlike Kafka's, a follower's HW does not
// go down when a new leader reports a lower one (everything below it is
// committed); only a truncation below it, after an unclean election, lowers
// it.
//
// # The Ready contract
//
// Every input either fails (and then changes nothing, except for
// ErrInconsistentLog, after which the state machine must be dropped) or
// changes the state and may queue output. The caller drains Ready after
// each input, carries the output out and reports back: Truncated after a
// truncation, FetchResponded (or FetchOutOfRange, FetchFailed) after a fetch,
// ISRCommitted or ISRProposalFailed after a proposal; a refused ISRCommitted
// (Consul committed an ISR or ELR this leader cannot take) leaves the
// proposal in flight and the HW over the wrong ISR, so the caller resigns
// instead of leading on. Members of Consul's ISR or ELR that are not
// replicas are no refusal: NewLeader and ISRCommitted leave them out and
// propose the state without them (ISRProposal.NonReplicas, for the caller
// to warn about), the HW standing still until that commits. A HW checkpoint need not be written before acks
// are answered: an acknowledged record is safe because it is on every ISR
// member, not because of the checkpoint.
package replicate
