package agent

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/logagent/logagent/agent/kafkabroker"
	"github.com/logagent/logagent/agent/partition"
	"github.com/logagent/logagent/agent/reply"
	"github.com/logagent/logagent/config"
	"github.com/logagent/logagent/election"

	"github.com/logagent/logagent/wire"
)

// defaultUncleanDelay is how long a partition must have been without a
// leader before a replica outside the ISR may take it, for topics that
// allow unclean election.
const defaultUncleanDelay = 30 * time.Second

// topicDescription is a topic as GET /v1/topics/{topic} shows it.
type topicDescription struct {
	Name   string          `json:"name"`
	Config topicConfigJSON `json:"config"`
	// PreviousConfig is, in an alter's answer, the config the alter
	// replaced, as it read it from Consul.
	PreviousConfig *topicConfigJSON       `json:"previous_config,omitempty"`
	Partitions     []partitionDescription `json:"partitions"`
}

type topicConfigJSON struct {
	ID                    string `json:"id"`
	Partitions            int    `json:"partitions"`
	ReplicationFactor     int    `json:"replication_factor"`
	MinInsyncReplicas     int    `json:"min_insync_replicas"`
	UncleanLeaderElection bool   `json:"unclean_leader_election"`
	// The effective retention limits on this agent (describeSettings);
	// absent when the topic's storage settings are ones this agent does
	// not know.
	Retention      string    `json:"retention,omitempty"`
	RetentionBytes *int64    `json:"retention_bytes,omitempty"`
	AgentDefaults  *[]string `json:"agent_defaults,omitempty"`
}

// partitionDescription is one partition: the leader and ISR from Consul
// (leader is empty while the partition has none), and the positions of this
// agent's replica when it has one.
type partitionDescription struct {
	Partition int      `json:"partition"`
	Leader    string   `json:"leader"`
	Epoch     int32    `json:"epoch"`
	Replicas  []string `json:"replicas"`
	ISR       []string `json:"isr"`
	// ELR lists the eligible leader replicas: outside the ISR, yet holding
	// every committed record (docs/design.md §6).
	ELR            []string `json:"elr,omitempty"`
	HighWatermark  *int64   `json:"high_watermark,omitempty"`
	LogStartOffset *int64   `json:"log_start_offset,omitempty"`
	LogEndOffset   *int64   `json:"log_end_offset,omitempty"`
	Role           string   `json:"role,omitempty"`
	// Reassignment is the partition's move in flight (docs/design.md
	// §7.6), with its progress when this agent leads.
	Reassignment *reassignMove `json:"reassignment,omitempty"`
}

// handleCreateTopic serves POST /v1/topics.
func (a *Agent) handleCreateTopic(ctx *fasthttp.RequestCtx) {
	if !a.serving(ctx) {
		return
	}
	var req kafkabroker.CreateTopicRequest
	if err := reply.DecodeOneObject(ctx.PostBody(), &req); err != nil {
		reply.WriteError(ctx, fasthttp.StatusBadRequest, wire.CodeInvalidRequest, "body is not a topic: "+err.Error(), false)
		return
	}
	// The sidecars create the offsets topic with its own storage (no
	// retention, small segments); one created here would have the topic
	// defaults', and alter and delete refuse it.
	if refuseInternalTopic(ctx, req.Name, "created") {
		return
	}
	tc, assignment, err := a.createTopic(req, nil)
	switch {
	case err == nil:
	case errors.Is(err, election.ErrTopicExists):
		reply.WriteError(ctx, fasthttp.StatusConflict, wire.CodeTopicExists, "topic "+req.Name+" exists", false)
		return
	case errors.Is(err, election.ErrNotEnoughAgents), errors.Is(err, election.ErrInvalidTopic):
		reply.WriteError(ctx, fasthttp.StatusBadRequest, wire.CodeInvalidRequest, err.Error(), false)
		return
	default:
		writeErr(ctx, err)
		return
	}
	desc := topicDescription{Name: tc.Name, Config: a.describeConfig(tc)}
	for p, replicas := range assignment {
		desc.Partitions = append(desc.Partitions, partitionDescription{Partition: p, Replicas: replicas, ISR: replicas})
	}
	reply.WriteJSON(ctx, fasthttp.StatusCreated, desc)
}

// Bounds of a topic's creation, which writes two Consul keys per
// partition in transactions of 64 operations (election.CreateTopic) and
// then waits for this agent's metadata watch to list them: 10,000
// partitions are 313 transactions one after the other, and a listing of
// 20,000 keys more to decode, which a bound of peerCallTimeout alone did
// not cover (the topic was created, and the request answered 503).
const (
	createTopicPerPartition = 3 * time.Millisecond
	createTopicMaxTimeout   = 50 * time.Second
)

// createTopicTimeout bounds the creation of a topic of partitions: well
// inside the minute that the client API's own timeouts and the clients'
// leave a request.
func createTopicTimeout(partitions int) time.Duration {
	return min(createTopicMaxTimeout, peerCallTimeout+time.Duration(partitions)*createTopicPerPartition)
}

// createTopic creates a topic, for POST /v1/topics and Kafka's
// CreateTopics, and returns once this agent's metadata shows it. storage,
// when not nil, is the topic's own storage settings
// (partition.TopicStorage). An invalid request is a *reply.APIError; the
// election package's ErrTopicExists, ErrNotEnoughAgents and ErrInvalidTopic
// come as they are, for each API to answer in its own terms.
func (a *Agent) createTopic(req kafkabroker.CreateTopicRequest, storage []byte) (election.TopicConfig, [][]string, error) {
	if p := req.Partitions; p != nil && (*p < 1 || *p > config.MaxTopicPartitions) {
		return election.TopicConfig{}, nil, reply.NewAPIError(fasthttp.StatusBadRequest, wire.CodeInvalidRequest,
			fmt.Sprintf("partitions %d is outside 1 to %d", *p, config.MaxTopicPartitions), false)
	}
	if !election.ValidTopicName(req.Name) {
		return election.TopicConfig{}, nil, reply.InvalidTopicName(req.Name)
	}
	partitions := a.cfg.TopicDefaults.Partitions
	if req.Partitions != nil {
		partitions = *req.Partitions
	}
	callCtx, cancel := context.WithTimeout(context.Background(), createTopicTimeout(partitions))
	defer cancel()
	nodes, err := a.placementNodes(callCtx)
	if err != nil {
		return election.TopicConfig{}, nil, err
	}
	tc := a.topicConfig(req, len(nodes))
	tc.Storage = storage
	assignment, err := election.AssignReplicas(nodes, tc.Partitions, tc.ReplicationFactor)
	if err == nil {
		err = a.coord.CreateTopic(callCtx, tc, assignment)
	}
	if err == nil {
		// Answer once this agent's metadata has the topic, so a describe
		// or produce that follows the creation finds it.
		err = a.waitTopic(callCtx, tc.Name, tc.ID)
	}
	switch {
	case err == nil:
		return tc, assignment, nil
	case errors.Is(err, election.ErrTopicExists), errors.Is(err, election.ErrNotEnoughAgents), errors.Is(err, election.ErrInvalidTopic):
		return tc, nil, err
	default:
		return tc, nil, reply.NewAPIError(fasthttp.StatusServiceUnavailable, wire.CodeServiceUnavailable, "cannot create topic: "+err.Error(), true)
	}
}

// topicConfig fills a create request in from topic_defaults.
func (a *Agent) topicConfig(req kafkabroker.CreateTopicRequest, agents int) election.TopicConfig {
	d := a.cfg.TopicDefaults
	tc := election.TopicConfig{
		ID:                    rand.Text(),
		Name:                  req.Name,
		Partitions:            d.Partitions,
		ReplicationFactor:     max(1, min(d.ReplicationFactor, agents)),
		UncleanLeaderElection: d.UncleanLeaderElection,
		UncleanDelay:          defaultUncleanDelay,
	}
	if req.Partitions != nil {
		tc.Partitions = *req.Partitions
	}
	if req.ReplicationFactor != nil {
		tc.ReplicationFactor = *req.ReplicationFactor
	}
	tc.MinInsyncReplicas = max(1, min(d.MinInsyncReplicas, tc.ReplicationFactor))
	if req.MinInsyncReplicas != nil {
		tc.MinInsyncReplicas = *req.MinInsyncReplicas
	}
	if req.UncleanLeaderElection != nil {
		tc.UncleanLeaderElection = *req.UncleanLeaderElection
	}
	return tc
}

// waitTopic waits until the metadata shows the topic incarnation id.
func (a *Agent) waitTopic(ctx context.Context, name, id string) error {
	for {
		snap := a.coord.Metadata()
		if tm, ok := snap.Topic(name); ok && tm.Config.ID == id {
			return nil
		}
		select {
		case <-snap.Changed():
		case <-ctx.Done():
			return fmt.Errorf("agent: topic %s created, but the metadata watch has not shown it yet: %w", name, ctx.Err())
		}
	}
}

func (a *Agent) describeConfig(tc election.TopicConfig) topicConfigJSON {
	c := topicConfigJSON{
		ID:                    tc.ID,
		Partitions:            tc.Partitions,
		ReplicationFactor:     tc.ReplicationFactor,
		MinInsyncReplicas:     tc.MinInsyncReplicas,
		UncleanLeaderElection: tc.UncleanLeaderElection,
	}
	if s, err := a.describeSettings(tc); err == nil {
		c.Retention, c.RetentionBytes, c.AgentDefaults = s.retention, &s.retentionBytes, &s.agentDefaults
	}
	return c
}

// handleListTopics serves GET /v1/topics: the topic names.
func (a *Agent) handleListTopics(ctx *fasthttp.RequestCtx) {
	if !a.serving(ctx) {
		return
	}
	topics := a.coord.Metadata().Topics()
	if topics == nil {
		topics = []string{} // [] rather than null: a list, even empty
	}
	reply.WriteJSON(ctx, fasthttp.StatusOK, struct {
		Topics []string `json:"topics"`
	}{topics})
}

// handleDescribeTopic serves GET /v1/topics/{topic}.
func (a *Agent) handleDescribeTopic(ctx *fasthttp.RequestCtx) {
	if !a.serving(ctx) {
		return
	}
	name, ok := a.topicParam(ctx)
	if !ok {
		return
	}
	a.writeTopicDescription(ctx, name, nil)
}

// writeTopicDescription answers with the topic's description, with the
// config an alter replaced when previous is not nil.
func (a *Agent) writeTopicDescription(ctx *fasthttp.RequestCtx, name string, previous *topicConfigJSON) {
	tm, ok := a.lookupTopic(name)
	if !ok {
		reply.WriteAPIError(ctx, reply.UnknownTopic(name))
		return
	}
	if tm.Err != nil {
		reply.WriteError(ctx, fasthttp.StatusServiceUnavailable, wire.CodeLeaderNotAvailable, tm.Err.Error(), true)
		return
	}
	desc := topicDescription{Name: name, Config: a.describeConfig(tm.Config), PreviousConfig: previous}
	for _, pm := range tm.Partitions {
		pd := partitionDescription{
			Partition: pm.Partition,
			Epoch:     pm.State.Epoch,
			Replicas:  pm.Replicas,
			ISR:       pm.State.ISR,
		}
		for _, e := range pm.State.ELR {
			pd.ELR = append(pd.ELR, e.Node)
		}
		if pm.LeaderSession != "" {
			pd.Leader = pm.State.Leader
		}
		if _, ok := a.replicas.Offline(name, pm.Partition); ok {
			pd.Role = roleOffline
		}
		pd.Reassignment = a.moveStatus(name, pm)
		if r := a.replicas.Get(name, pm.Partition); r != nil {
			log := r.CurrentLog()
			hw, lso, leo := log.HighWatermark(), log.LogStartOffset(), log.LogEndOffset()
			pd.HighWatermark, pd.LogStartOffset, pd.LogEndOffset = &hw, &lso, &leo
			v := r.CurrentView()
			pd.Role = v.Role.String()
			if v.Role == roleLeader {
				// The leader's own view is fresher than the watch's.
				pd.Leader, pd.Epoch, pd.ISR = a.cfg.NodeID, v.Epoch, v.ISR
			}
		}
		desc.Partitions = append(desc.Partitions, pd)
	}
	reply.WriteJSON(ctx, fasthttp.StatusOK, desc)
}

// Helpers shared by the client API handlers.

// serving answers 503 unless the agent serves, which it does until its
// leaderships are handed over.
func (a *Agent) serving(ctx *fasthttp.RequestCtx) bool {
	if s := a.state.Load(); s == stateServing || s == stateHandingOver {
		return true
	}
	reply.WriteError(ctx, fasthttp.StatusServiceUnavailable, wire.CodeServiceUnavailable, "agent is not serving", true)
	return false
}

// partitionParams reads {topic} and {partition} and checks them against
// the metadata: a malformed topic name or partition number is refused
// before anything is looked up (400), a topic or partition the metadata
// does not have is 404.
func (a *Agent) partitionParams(ctx *fasthttp.RequestCtx) (string, int, error) {
	topic := pathParam(ctx, "topic")
	if !election.ValidTopicName(topic) {
		return "", 0, reply.InvalidTopicName(topic)
	}
	p, err := parsePartition(pathParam(ctx, "partition"))
	if err != nil {
		return "", 0, err
	}
	tm, ok := a.lookupTopic(topic)
	if !ok {
		return "", 0, reply.UnknownTopic(topic)
	}
	if err := checkPartition("topic "+topic, p, len(tm.Partitions)); err != nil {
		return "", 0, err
	}
	return topic, p, nil
}

// parsePartition reads a partition number, from a path segment or the
// partition parameter. One that is no partition number at all (not a
// decimal integer, negative, beyond int32, empty) is a bad request, 400
// invalid_request; whether the topic has the partition is checkPartition's
// question. Both were 404 unknown_partition, so a client could not tell a
// typo from a partition added since its metadata.
func parsePartition(v string) (int, error) {
	n, err := strconv.ParseInt(v, 10, 32)
	if err != nil || n < 0 {
		return 0, reply.NewAPIError(fasthttp.StatusBadRequest, wire.CodeInvalidRequest,
			fmt.Sprintf("partition %q is not a partition number (an integer in [0, %d])", v, math.MaxInt32), false)
	}
	return int(n), nil
}

// checkPartition answers 404 unknown_partition for a partition number
// that topic (its name in the message), of count partitions, does not
// have.
func checkPartition(topic string, p, count int) error {
	if p >= count {
		return reply.NewAPIError(fasthttp.StatusNotFound, wire.CodeUnknownPartition,
			fmt.Sprintf("%s has partitions 0 to %d, not %d", topic, count-1, p), false)
	}
	return nil
}

// topicSyncTimeout bounds the wait for the metadata watch when a topic is
// not in the snapshot.
const topicSyncTimeout = 2 * time.Second

// lookupTopic finds a topic in the metadata. A topic missing from the
// snapshot may have just been created through another agent, so before
// answering "unknown topic" the agent catches its metadata up with Consul
// (rate-limited in election, so unknown names cannot flood Consul).
func (a *Agent) lookupTopic(name string) (*election.TopicMeta, bool) {
	if tm, ok := a.coord.Metadata().Topic(name); ok {
		return tm, true
	}
	ctx, cancel := context.WithTimeout(context.Background(), topicSyncTimeout)
	defer cancel()
	snap, err := a.coord.SyncMetadata(ctx)
	if err != nil {
		a.log.Debug("cannot sync metadata with Consul", "topic", name, "error", err)
		return nil, false
	}
	return snap.Topic(name)
}

// notLeaderError answers a request this agent cannot serve for a partition:
// 409 not_leader naming the leader and its client address, or 503
// leader_not_available when the partition has no leader.
func (a *Agent) notLeaderError(topic string, partition int, message string) *reply.APIError {
	pm, ok := a.coord.Metadata().Partition(topic, partition)
	if !ok || pm.LeaderSession == "" || pm.State.Leader == "" {
		return reply.NewAPIError(fasthttp.StatusServiceUnavailable, wire.CodeLeaderNotAvailable, a.noLeaderMessage(topic, partition), true)
	}
	if f, ok := a.replicas.Offline(topic, partition); ok {
		message = offlineMessage(topic, partition, f)
	}
	e := reply.NewAPIError(fasthttp.StatusConflict, wire.CodeNotLeader, message, true)
	e.Leader = pm.State.Leader
	if info, ok := a.agents.lookup(pm.State.Leader); ok {
		e.LeaderAddress = info.ClientAddr
	}
	return e
}

// noLeaderMessage says that a partition has no leader, and why this
// agent's replica cannot take the lead when it is offline.
func (a *Agent) noLeaderMessage(topic string, partition int) string {
	msg := reply.PartitionName(topic, partition) + " has no leader now"
	if f, ok := a.replicas.Offline(topic, partition); ok {
		msg += "; " + offlineMessage(topic, partition, f)
	}
	return msg
}

func offlineMessage(topic string, partition int, f partition.OpenFailure) string {
	return fmt.Sprintf("this agent's replica of %s is offline, its log could not be opened (%d attempts, tried again at %s): %v",
		reply.PartitionName(topic, partition), f.Attempts, f.RetryAt.UTC().Format(time.RFC3339), f.Err)
}

// intParam reads an optional integer query parameter within [lo, hi]: def
// when it is absent; one given without a value ("max_bytes=") is refused,
// as an out-of-range one.
func intParam(args *fasthttp.Args, name string, def, lo, hi int64) (int64, error) {
	if !args.Has(name) {
		return def, nil
	}
	v := args.Peek(name)
	n, err := strconv.ParseInt(string(v), 10, 64)
	if err != nil || n < lo || n > hi {
		return 0, reply.NewAPIError(fasthttp.StatusBadRequest, wire.CodeInvalidRequest,
			fmt.Sprintf("%s=%q must be an integer in [%d, %d]", name, v, lo, hi), false)
	}
	return n, nil
}

// durationParam reads an optional duration query parameter ("500ms", "5s")
// within [0, most].
func durationParam(args *fasthttp.Args, name string, def, most time.Duration) (time.Duration, error) {
	v := args.Peek(name)
	if len(v) == 0 {
		return def, nil
	}
	d, err := time.ParseDuration(string(v))
	if err != nil || d < 0 || d > most {
		return 0, reply.NewAPIError(fasthttp.StatusBadRequest, wire.CodeInvalidRequest,
			fmt.Sprintf("%s=%q must be a duration between 0s and %s", name, v, most), false)
	}
	return d, nil
}

// handleDeleteTopic serves DELETE /v1/topics/{topic}: the topic's keys go
// from Consul, and every agent closes and removes its replicas when its
// metadata watch sees the deletion. The answer comes once this agent's
// metadata no longer has the topic.
func (a *Agent) handleDeleteTopic(ctx *fasthttp.RequestCtx) {
	if !a.serving(ctx) {
		return
	}
	name, ok := a.topicParam(ctx)
	if !ok || refuseInternalTopic(ctx, name, "deleted") {
		return
	}
	switch err := a.deleteTopic(name); {
	case err == nil:
		ctx.SetStatusCode(fasthttp.StatusNoContent)
	case errors.Is(err, election.ErrUnknownTopic):
		reply.WriteAPIError(ctx, reply.UnknownTopic(name))
	case errors.Is(err, election.ErrInvalidTopic):
		reply.WriteAPIError(ctx, reply.InvalidTopicName(name))
	default:
		reply.WriteError(ctx, fasthttp.StatusServiceUnavailable, wire.CodeServiceUnavailable, "delete topic: "+err.Error(), true)
	}
}

// deleteTopic deletes a topic, for DELETE /v1/topics/{topic} and Kafka's
// DeleteTopics, and returns once this agent's metadata no longer has it.
func (a *Agent) deleteTopic(name string) error {
	callCtx, cancel := context.WithTimeout(context.Background(), peerCallTimeout)
	defer cancel()
	err := a.coord.DeleteTopic(callCtx, name)
	if err == nil {
		err = a.waitTopicGone(callCtx, name)
	}
	return err
}

// waitTopicGone waits until this agent's metadata no longer has the topic.
func (a *Agent) waitTopicGone(ctx context.Context, name string) error {
	for {
		snap := a.coord.Metadata()
		if _, ok := snap.Topic(name); !ok {
			return nil
		}
		select {
		case <-snap.Changed():
		case <-ctx.Done():
			return fmt.Errorf("agent: topic %s deleted, not yet seen gone: %w", name, ctx.Err())
		}
	}
}

// topicParam reads {topic}, answering 400 invalid_topic_name for a name
// no topic can have, so a bad name never reaches the metadata or the disk.
func (a *Agent) topicParam(ctx *fasthttp.RequestCtx) (string, bool) {
	name := pathParam(ctx, "topic")
	if !election.ValidTopicName(name) {
		reply.WriteAPIError(ctx, reply.InvalidTopicName(name))
		return "", false
	}
	return name, true
}

// statusResponse is GET /v1/status: this agent, the agents it sees and its
// replicas.
type statusResponse struct {
	NodeID     string            `json:"node_id"`
	State      string            `json:"state"`
	ClientAddr string            `json:"client_address"`
	PeerAddr   string            `json:"peer_address"`
	Agents     []statusAgent     `json:"agents"`
	Partitions []statusPartition `json:"partitions"`
	// MetadataIndex is the Consul index of the metadata this agent acts on.
	MetadataIndex uint64 `json:"metadata_index"`
}

type statusAgent struct {
	NodeID     string `json:"node_id"`
	ClientAddr string `json:"client_address"`
	PeerAddr   string `json:"peer_address"`
	// NotPassing is set for an agent in Consul maintenance mode or with
	// a check in warning: alive and serving, it takes no new replica.
	NotPassing bool `json:"not_passing,omitempty"`
	// Draining is set for an agent being drained (logagent node drain): its
	// replicas move off and it takes no new one.
	Draining bool `json:"draining,omitempty"`
	// Version is the build the agent registered in Consul.
	Version string `json:"version,omitempty"`
}

type statusPartition struct {
	Topic     string   `json:"topic"`
	Partition int      `json:"partition"`
	Role      string   `json:"role"`
	Leader    string   `json:"leader"`
	Epoch     int32    `json:"epoch"`
	ISR       []string `json:"isr"`
	// The positions are absent when the replica is offline: its log is
	// not open.
	HighWatermark  *int64 `json:"high_watermark,omitempty"`
	LogEndOffset   *int64 `json:"log_end_offset,omitempty"`
	LogStartOffset *int64 `json:"log_start_offset,omitempty"`
	// OfflineReason says why an offline replica's log could not be
	// opened; OpenAttempts counts the tries so far.
	OfflineReason string `json:"offline_reason,omitempty"`
	OpenAttempts  int    `json:"open_attempts,omitempty"`
	// Reassignment is the partition's move in flight (docs/design.md
	// §7.6), with its progress when this agent leads.
	Reassignment *reassignMove `json:"reassignment,omitempty"`
}

// roleOffline is the role of a replica the metadata assigns here whose log
// could not be opened.
const roleOffline = "offline"

// handleStatus serves GET /v1/status.
func (a *Agent) handleStatus(ctx *fasthttp.RequestCtx) {
	current := a.state.Load()
	snap := a.coord.Metadata()
	st := statusResponse{
		NodeID: a.cfg.NodeID, State: stateName(current), MetadataIndex: snap.Index,
		ClientAddr: a.cfg.Client.Address, PeerAddr: a.cfg.Peer.AdvertiseAddress,
		Agents: []statusAgent{}, Partitions: []statusPartition{},
	}
	// Asked of Consul now, so the answer is not up to one directory
	// refresh old; the directory's view if Consul does not answer.
	agents := a.agents.all()
	callCtx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if live, err := a.coord.Agents(callCtx); err == nil {
		slices.SortFunc(live, func(x, y election.AgentInfo) int { return strings.Compare(x.NodeID, y.NodeID) })
		agents = live
	}
	for _, info := range agents {
		st.Agents = append(st.Agents, statusAgent{NodeID: info.NodeID, ClientAddr: info.ClientAddr, PeerAddr: info.PeerAddr,
			NotPassing: !info.Passing, Draining: snap.IsDraining(info.NodeID), Version: info.Version})
	}
	// The replicas exist once the agent has served (the state's store
	// orders their creation before this read).
	if current != stateStarting {
		for _, topic := range snap.Topics() {
			tm, _ := snap.Topic(topic)
			for _, pm := range tm.Partitions {
				if sp, _, ok := a.replicaStatus(topic, pm); ok {
					st.Partitions = append(st.Partitions, sp)
				}
			}
		}
	}
	reply.WriteJSON(ctx, fasthttp.StatusOK, st)
}

// replicaStatus is this agent's replica of pm as /v1/status and the
// metrics show it, and the replica itself (nil when it is offline); ok is
// false when this agent has no replica of pm. Call it only once the agent
// has served (a.replicas exists).
func (a *Agent) replicaStatus(topic string, pm election.PartitionMeta) (statusPartition, *partition.Replica, bool) {
	sp := statusPartition{Topic: topic, Partition: pm.Partition,
		Leader: pm.State.Leader, Epoch: pm.State.Epoch, ISR: pm.State.ISR, Reassignment: a.moveStatus(topic, pm)}
	r := a.replicas.Get(topic, pm.Partition)
	if r == nil {
		f, ok := a.replicas.Offline(topic, pm.Partition)
		if ok {
			sp.Role, sp.OfflineReason, sp.OpenAttempts = roleOffline, f.Err.Error(), f.Attempts
		}
		return sp, nil, ok
	}
	v, log := r.CurrentView(), r.CurrentLog()
	hw, leo, lso := log.HighWatermark(), log.LogEndOffset(), log.LogStartOffset()
	sp.Role, sp.HighWatermark, sp.LogEndOffset, sp.LogStartOffset = v.Role.String(), &hw, &leo, &lso
	if v.Role == roleLeader {
		sp.Leader, sp.Epoch, sp.ISR = a.cfg.NodeID, v.Epoch, v.ISR
	}
	return sp, r, true
}
