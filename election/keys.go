package election

import (
	"cmp"
	"encoding/json"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
)

// Consul KV layout under the prefix (default "logagent/"). Every value is
// JSON. The topic config is written last on creation, so a topic is visible
// only once all of its partition keys exist.
//
//	<prefix>topics/<topic>/config        TopicConfig, created with cas index 0
//	<prefix>topics/<topic>/<p>/replicas  ["n1","n2","n3"]  first = preferred leader
//	<prefix>topics/<topic>/<p>/state     {"leader":"n1","epoch":7,"isr":["n1","n2"],
//	                                       "elr":[{"node":"n3","log_end_offset":1200}]}  (elr only when set)
//	<prefix>topics/<topic>/<p>/leader    {"node":"n1","epoch":7}  lock key; its
//	                                     Session field is the leader's session
//	<prefix>topics/<topic>/<p>/reassign  {"target":["n1","n2","n4"],"adding":["n4"],
//	                                      "removing":["n3"]}  a move in flight
//	                                     (reassign.go); replicas is then the union
//	<prefix>topics/~deleted/<topic id>   {"topic":"orders"}  tombstone written by
//	                                     DeleteTopic in the same txn that deletes
//	                                     the topic; '~' is not allowed in topic
//	                                     names, so it cannot clash with a topic
//	<prefix>topics/~draining/<node id>   {"node":"n2"}  the agent is being
//	                                     drained (drain.go): partition leaders
//	                                     move its replicas away, and no move
//	                                     picks it as a target
//	<prefix>producer_ids                 1796123288216059  the next unreserved
//	                                     idempotent-producer id (producer.go)
//	<prefix>producer_epochs/<id>         3  the last epoch handed out for id;
//	                                     absent: 0, the one Allocate answers
//	<prefix>groups/<group id>            a consumer group's members and
//	                                     assignment (groups.go); the id is
//	                                     path-escaped, so it holds no '/'
//
//	          writer                          guard
//	config    CreateTopic / DeleteTopic       cas 0 / delete-tree in one txn
//	          AlterTopic                      cas (read index), in the last txn
//	replicas  CreateTopic                     cas 0
//	          AlterTopic (new partitions)     check-index config, delete-tree, cas 0
//	          StartReassign := union          check-index config, cas replicas, cas reassign 0
//	                                          (a shrinking target: cas config, flags one up)
//	                                          (StartReassignFrom: at the index decided from)
//	          CompleteReassign := target      the ISR change txn + cas replicas, delete-cas reassign
//	reassign  StartReassign / CompleteReassign (above)
//	state     CreateTopic or AlterTopic (epoch 0, leader ""), then only the leader:
//	          election   txn [lock leader (own session), cas state (read index)]
//	          ISR change txn [check-session leader (own session), cas state,
//	                          check-index replicas (the snapshot's)]
//	leader    the election txn (lock verb), released by Resign (check-index
//	          at its election's index, unlock) and Close
//	~deleted  DeleteTopic                     check-index config, delete-tree, set
//	~draining SetDraining                     set / delete (a flag; each move it causes is guarded)
//	producer_ids     ProducerIDs.Allocate, 1000 ids a write   cas (read index)
//	producer_epochs  ProducerIDs.Bump                         cas (read index)
//	groups           the group's coordinator                  cas (last index)
//
// A tombstone tells agents that a topic incarnation was deleted on purpose,
// so they may delete its data; a topic that is merely absent (a Consul that
// lost its data) is not proof of that. Tombstones are small and never removed,
// and so are epoch keys (one per id ever bumped). The producer keys are
// outside topics/, so the watch does not see them.
//
// The epoch in state is the fencing token: it only grows, and only a txn that
// holds the lock in the same step can write it. The leader key's LockIndex
// is not used as an epoch because deleting and re-creating a key resets it.

// keyspace builds and parses keys under one prefix.
type keyspace struct {
	prefix string
}

// deletedDir is the path segment under topicsRoot that holds tombstones,
// drainingDir the one that holds the agents being drained.
const (
	deletedDir  = "~deleted"
	drainingDir = "~draining"
)

func (k keyspace) topicsRoot() string { return k.prefix + "topics/" }
func (k keyspace) tombstone(topicID string) string {
	return k.topicsRoot() + deletedDir + "/" + topicID
}
func (k keyspace) draining(node string) string {
	return k.topicsRoot() + drainingDir + "/" + node
}
func (k keyspace) topicRoot(topic string) string { return k.topicsRoot() + topic + "/" }
func (k keyspace) config(topic string) string    { return k.topicRoot(topic) + "config" }
func (k keyspace) replicas(topic string, p int) string {
	return k.partitionRoot(topic, p) + "replicas"
}
func (k keyspace) state(topic string, p int) string { return k.partitionRoot(topic, p) + "state" }
func (k keyspace) reassign(topic string, p int) string {
	return k.partitionRoot(topic, p) + "reassign"
}
func (k keyspace) leader(topic string, p int) string { return k.partitionRoot(topic, p) + "leader" }
func (k keyspace) partitionRoot(topic string, p int) string {
	return k.topicRoot(topic) + strconv.Itoa(p) + "/"
}
func (k keyspace) producerIDs() string { return k.prefix + "producer_ids" }
func (k keyspace) groupsRoot() string  { return k.prefix + "groups/" }
func (k keyspace) group(id string) string {
	return k.groupsRoot() + url.PathEscape(id)
}
func (k keyspace) producerEpoch(id int64) string {
	return k.prefix + "producer_epochs/" + strconv.FormatInt(id, 10)
}

// keyKind names what a key under topicsRoot holds.
type keyKind int

const (
	kindUnknown keyKind = iota
	kindConfig
	kindReplicas
	kindState
	kindLeader
	kindReassign
	// kindTombstone's "topic" is the deleted incarnation's topic ID.
	kindTombstone
	// kindDraining's "topic" is the node id of an agent being drained.
	kindDraining
)

// parse splits a full key into topic, partition and kind; kindUnknown for a
// key that is not part of the layout (it is ignored, not treated as corrupt,
// so later versions can add keys).
func (k keyspace) parse(key string) (topic string, partition int, kind keyKind) {
	rest, ok := strings.CutPrefix(key, k.topicsRoot())
	if !ok {
		return "", 0, kindUnknown
	}
	parts := strings.Split(rest, "/")
	switch {
	case len(parts) == 2 && parts[0] == deletedDir && parts[1] != "":
		return parts[1], 0, kindTombstone
	case len(parts) == 2 && parts[0] == drainingDir && nodeIDPattern.MatchString(parts[1]):
		return parts[1], 0, kindDraining
	case len(parts) == 2 && parts[1] == "config":
		return parts[0], 0, kindConfig
	case len(parts) == 3:
		p, err := strconv.Atoi(parts[1])
		if err != nil || p < 0 || strconv.Itoa(p) != parts[1] {
			return "", 0, kindUnknown
		}
		switch parts[2] {
		case "replicas":
			return parts[0], p, kindReplicas
		case "state":
			return parts[0], p, kindState
		case "leader":
			return parts[0], p, kindLeader
		case "reassign":
			return parts[0], p, kindReassign
		}
	}
	return "", 0, kindUnknown
}

// PartitionState is the value of the state key.
type PartitionState struct {
	// Leader is the node id of the leader elected at Epoch, "" before the
	// first election.
	Leader string `json:"leader"`
	// Epoch is the leader epoch, the fencing token; 0 before the first
	// election.
	Epoch int32 `json:"epoch"`
	// ISR is the in-sync replica set.
	ISR []string `json:"isr"`
	// ELR are the eligible leader replicas (KIP-966): replicas outside the
	// ISR that still hold every committed record, because they left it in a
	// change that took the ISR below min_insync_replicas, after which the
	// HW cannot grow. When no ISR member is alive, one of them may lead,
	// the longest log first.
	ELR []EligibleReplica `json:"elr,omitempty"`
}

// EligibleReplica is one member of a partition's ELR, with its log end as
// its leader last knew it.
type EligibleReplica struct {
	Node         string `json:"node"`
	LogEndOffset int64  `json:"log_end_offset"`
}

// eligibleIndex is node's place in the order in which eligible replicas
// may take the lead (longest log first, then replica order), -1 if it is
// not one.
func (st PartitionState) eligibleIndex(node string, replicas []string) int {
	order := slices.Clone(st.ELR)
	slices.SortStableFunc(order, func(a, b EligibleReplica) int {
		if a.LogEndOffset != b.LogEndOffset {
			return cmp.Compare(b.LogEndOffset, a.LogEndOffset)
		}
		return cmp.Compare(slices.Index(replicas, a.Node), slices.Index(replicas, b.Node))
	})
	return slices.IndexFunc(order, func(e EligibleReplica) bool { return e.Node == node })
}

// withoutEligible is the ELR less node.
func (st PartitionState) withoutEligible(node string) []EligibleReplica {
	return slices.DeleteFunc(slices.Clone(st.ELR), func(e EligibleReplica) bool { return e.Node == node })
}

// cleanElectionISR is the ISR a clean election of self writes: Consul's,
// less the previous leader when Consul reports its agent dead
// (leaderDead), if what is left still reaches minISR and no eligible
// replicas are recorded. Kafka's controller takes a fenced broker out of
// the ISR in the record that elects the new leaders. Here the new leader
// would propose the same change first thing (SetDeadFollowers), a second
// transaction per partition: after a failover at 10,000 partitions those
// came through Consul 1-7 s after the elections, and each partition's
// acks=all writes waited on the dead member until its own came. Below
// minISR, or with an ELR, the leader's own change, which records eligible
// replicas, makes it; dead followers leave the ISR by their leader's.
func (st PartitionState) cleanElectionISR(self string, leaderDead bool, minISR int) []string {
	if !leaderDead || st.Leader == self || len(st.ELR) > 0 {
		return st.ISR
	}
	isr := slices.DeleteFunc(slices.Clone(st.ISR), func(id string) bool { return id == st.Leader })
	if len(isr) == len(st.ISR) || len(isr) < minISR {
		return st.ISR
	}
	return isr
}

// leaderValue is the value of the leader key, for people reading Consul;
// decisions use the key's Session and the state key, and, while the key is
// free, Successor as a hint.
type leaderValue struct {
	Node  string `json:"node"`
	Epoch int32  `json:"epoch"`
	// Successor is set by a leader that released the key to hand the
	// partition over (Leadership.HandOver): the other replicas let it
	// campaign first.
	Successor string `json:"successor,omitempty"`
}

// successorHint is the successor a released leader key (its session and
// value) names for the leadership that state records, "" when it names
// none: held keys, values left by older releases or written by hand, and
// undecodable values carry no hint. The hint decides no safety question, only who campaigns first.
func successorHint(session string, value []byte, st PartitionState) string {
	if session != "" {
		return ""
	}
	var v leaderValue
	if json.Unmarshal(value, &v) != nil || v.Node != st.Leader || v.Epoch != st.Epoch || v.Successor == st.Leader {
		return ""
	}
	return v.Successor
}

func encodeJSON(v any) []byte {
	// The values are plain structs of strings, numbers and slices: Marshal
	// cannot fail on them.
	data, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("election: encode %T: %v", v, err))
	}
	return data
}

func decodeState(key string, value []byte) (PartitionState, error) {
	var st PartitionState
	if err := json.Unmarshal(value, &st); err != nil {
		return PartitionState{}, fmt.Errorf("%w: %s: %v", ErrCorruptMetadata, key, err)
	}
	if st.Epoch < 0 || len(st.ISR) == 0 {
		return PartitionState{}, fmt.Errorf("%w: %s: epoch %d, isr %v", ErrCorruptMetadata, key, st.Epoch, st.ISR)
	}
	// The ISR is a set, and a repeat (an operator's edit) names the same
	// member again. Passed on, the leader's state machine refused it and
	// stepped down, and every election met it again: the epoch climbed and
	// the partition took no writes. Read as the set, every reader (the
	// campaign's eligibility, cleanElectionISR's count against
	// min_insync_replicas, the leader) sees the same members, and the next
	// election or ISR change writes it back without the repeat.
	st.ISR = withoutRepeats(st.ISR)
	for _, e := range st.ELR {
		if e.Node == "" || slices.Contains(st.ISR, e.Node) {
			return PartitionState{}, fmt.Errorf("%w: %s: eligible replica %q is empty or in the ISR %v", ErrCorruptMetadata, key, e.Node, st.ISR)
		}
	}
	return st, nil
}

// withoutRepeats is ids without the later occurrences of each id.
func withoutRepeats(ids []string) []string {
	out := make([]string, 0, len(ids))
	for _, id := range ids {
		if !slices.Contains(out, id) {
			out = append(out, id)
		}
	}
	return out
}

func decodeReplicas(key string, value []byte) ([]string, error) {
	var replicas []string
	if err := json.Unmarshal(value, &replicas); err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrCorruptMetadata, key, err)
	}
	if len(replicas) == 0 {
		return nil, fmt.Errorf("%w: %s: no replicas", ErrCorruptMetadata, key)
	}
	if slices.Contains(replicas, "") {
		return nil, fmt.Errorf("%w: %s: an empty replica id in %q", ErrCorruptMetadata, key, replicas)
	}
	// As the ISR (decodeState): a repeat (an operator's edit) names the
	// same replica again, and the set is what every reader sees. Passed
	// on, the leader's state machine refused it and stepped down, and
	// every election met it again: the epoch climbed and the partition
	// took no writes.
	return withoutRepeats(replicas), nil
}
