package agent

import (
	"context"
	"errors"
	"fmt"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/valyala/fasthttp"
	"github.com/valyala/fasthttp/pprofhandler"

	"github.com/logagent/logagent/agent/certs"
	"github.com/logagent/logagent/agent/groups"
	"github.com/logagent/logagent/agent/kafkabroker"
	"github.com/logagent/logagent/agent/partition"
	"github.com/logagent/logagent/agent/peer"
	"github.com/logagent/logagent/agent/peerapi"
	"github.com/logagent/logagent/agent/reply"
	"github.com/logagent/logagent/config"
	"github.com/logagent/logagent/election"
	"github.com/logagent/logagent/groupcoord"
	"github.com/logagent/logagent/kafka"
	"github.com/logagent/logagent/metrics"
	"github.com/logagent/logagent/producer"
	"github.com/logagent/logagent/reassign"
	"github.com/logagent/logagent/record"
	"github.com/logagent/logagent/replicate"
	"github.com/logagent/logagent/segstore"
	"github.com/logagent/logagent/ui"

	"github.com/logagent/logagent/wire"
)

// Registrar is what the agent needs from Consul to be seen by its peers.
// election.Client implements it; unit tests may fake it.
type Registrar interface {
	// WaitForConsul blocks until Consul answers, retrying with backoff.
	WaitForConsul(ctx context.Context) error
	// Register registers the agent's service and keeps its TTL check
	// passing until Deregister.
	Register(ctx context.Context) error
	// Deregister removes the service and stops passing its check.
	Deregister(ctx context.Context) error
}

// Coordinator is everything the agent asks of Consul: registration, the
// metadata and liveness watches, elections, ISR changes and topic creation.
// election.Client implements it.
type Coordinator interface {
	Registrar
	// Metadata is the latest metadata snapshot.
	Metadata() *election.Snapshot
	// WaitMetadata returns the first snapshot at or above minIndex.
	WaitMetadata(ctx context.Context, minIndex uint64) (*election.Snapshot, error)
	// SyncMetadata returns a snapshot at least as new as Consul's data now.
	SyncMetadata(ctx context.Context) (*election.Snapshot, error)
	// CampaignAs blocks until this agent leads the partition, at an epoch
	// above the candidate's log's.
	CampaignAs(ctx context.Context, topic string, partition int, cand election.Candidate) (*election.Leadership, error)
	// ProposeISR writes an ISR change, and the eligible leader replicas it
	// leaves, with the guarded transaction.
	ProposeISR(ctx context.Context, topic string, partition int, epoch int32, isr []string, elr []election.EligibleReplica) error
	// CreateTopic stores a new topic.
	CreateTopic(ctx context.Context, tc election.TopicConfig, assignment [][]string) error
	// AlterTopic changes a topic's settings and adds partitions, guarded
	// by the config's index as read.
	AlterTopic(ctx context.Context, name string, change election.TopicChange) (election.TopicConfig, error)
	// DeleteTopic removes a topic's keys.
	DeleteTopic(ctx context.Context, name string) error
	// StartReassign starts moving a partition's replicas to target
	// (docs/design.md §7.6); done says there is nothing to move.
	StartReassign(ctx context.Context, topic string, partition int, target []string) (election.Reassignment, bool, error)
	// StartReassignFrom is StartReassign for a target chosen from the
	// metadata: refused unless the partition is still as from.
	StartReassignFrom(ctx context.Context, topic string, partition int, from election.DecidedFrom, target []string) (election.Reassignment, bool, error)
	// CancelReassign turns the move in flight into its way back to the
	// original replicas (docs/design.md §7.6).
	CancelReassign(ctx context.Context, topic string, partition int) (election.Reassignment, error)
	// CancelReassignFrom is CancelReassign of the move at reassignIndex
	// only: a leader's cancel of a stalled self-healing move.
	CancelReassignFrom(ctx context.Context, topic string, partition int, reassignIndex uint64) (election.Reassignment, error)
	// CompleteReassign is the leader's last step of a move.
	CompleteReassign(ctx context.Context, topic string, partition int, epoch int32, m election.Reassignment, replicasIndex, reassignIndex uint64, isr []string, elr []election.EligibleReplica) error
	// SetDraining marks an agent as being drained, or no longer
	// (docs/design.md §7.7).
	SetDraining(ctx context.Context, node string, on bool) error
	// Agents lists the agents Consul reports alive, each marked
	// passing every check or not (election.Client.Agents).
	Agents(ctx context.Context) ([]election.AgentInfo, error)
	// Liveness is the latest word of Consul on which agents are dead (the
	// watch starts on first use): leaders drop dead replicas from the ISR.
	Liveness() *election.Liveness
	// AllocateProducerID reserves a new idempotent-producer id, unique in
	// the cluster, at epoch 0.
	AllocateProducerID(ctx context.Context) (int64, int16, error)
	// BumpProducerEpoch hands out the next epoch of an allocated id, or a
	// new id at epoch 0 once the epochs ran out.
	BumpProducerEpoch(ctx context.Context, id int64) (int64, int16, error)
	// The consumer groups' stored states (groupcoord.Store).
	groupcoord.Store
	// Close hands every leadership over at once, destroys the session and
	// deregisters: the graceful stop.
	Close(ctx context.Context) error
}

// lifecycle states, as reported by /v1/health.
const (
	stateStarting int32 = iota
	stateServing
	// stateHandingOver is the first part of a graceful stop: /v1/health
	// answers 503, but both APIs serve on while the leaderships are handed
	// over (followers fetch, the sidecar forwards to the new leaders).
	stateHandingOver
	stateStopping
)

// stateName is a lifecycle state as /v1/status and the status page name it.
func stateName(state int32) string {
	return map[int32]string{stateStarting: "starting", stateServing: "serving", stateHandingOver: "stopping", stateStopping: "stopping"}[state]
}

// stopTimeout bounds each step of a graceful stop, so a stuck Consul or a
// slow client cannot hold the process past systemd's TimeoutStopSec.
const stopTimeout = 5 * time.Second

// retryGrace is how long produces in flight when the agent stops serving
// may still retry on the new leaders; the listeners' shutdown waits for
// them.
const retryGrace = time.Second

// Agent is one logagent daemon.
type Agent struct {
	cfg   *config.Config
	log   hclog.Logger
	coord Coordinator
	now   func() time.Time
	state atomic.Int32
	// files bounds the descriptors of every partition log (segstore.FileCache).
	files *segstore.FileCache

	// waitingFor says what a starting agent is waiting for, for /v1/health.
	waitingFor atomic.Value
	// stopping is closed when the listeners are about to close, after the
	// leaderships were handed over and the agent left Consul: held
	// requests end.
	stopping chan struct{}
	// retriesUntil is set when the agent stops serving: produces in flight
	// may retry on the new leaders until then (pauseBeforeRetry), so that
	// one the handover refused is not answered with that refusal.
	retriesUntil atomic.Pointer[time.Time]

	// clientToken, when set, is what every client API request but the
	// health check carries (client.token_file).
	clientToken []byte
	// peerTLS and clientTLS hold the listeners' TLS material, nil without
	// TLS; ReloadTLS swaps it.
	peerTLS, clientTLS *certs.Store

	peerToken    []byte
	recordLimits record.Limits
	// decoders check what clients send (recordLimits); logDecoders read
	// what the log holds, bounded by the batch only: a record written
	// before limits.max_record_bytes was lowered stays readable.
	decoders    sync.Pool
	logDecoders sync.Pool
	roundRobin  atomic.Uint64
	agents      *directory
	replicas    *partition.Manager
	// forwarder sends produces to other agents' peer APIs; fetchProxy
	// streams fetches from leaders' client APIs; clientAPIs asks leaders'
	// client APIs for positions.
	forwarder  *peer.Clients
	fetchProxy *peer.Clients
	clientAPIs *peer.Clients
	// coalesce combines concurrent produces; nil when producer.linger is 0.
	coalesce *coalescer
	// lanes are the producer ids of this sidecar's own idempotent sends;
	// nil without producer.sidecar_idempotence.
	lanes *lanes
	// groups coordinates the consumer groups of the offsets partitions
	// this agent leads; groupRouter sends group operations to their
	// coordinators, here or on other agents, and is its Host.
	groups      *groupcoord.Coordinator
	groupRouter *groups.Router
	// fs does the partitions' file I/O: the operating system's files, or in
	// tests segstore's FaultFS.
	fs segstore.FS
	// metrics are this agent's instruments, served at GET /metrics.
	metrics *metrics.Metrics
	// catchUp bounds the leaders' answers to replicas a reassignment adds
	// (replication.reassign_max_bytes_per_second); nil is no bound.
	catchUp *reassign.Throttle
}

// New prepares an agent; Run starts it. coord is normally an
// election.Client.
func New(cfg *config.Config, log hclog.Logger, coord Coordinator) *Agent {
	a := &Agent{cfg: cfg, log: log, coord: coord, now: time.Now, stopping: make(chan struct{}), fs: segstore.OSFS{}}
	a.waitingFor.Store("opening the data directory")
	a.catchUp = reassign.NewThrottle(cfg.Replication.ReassignMaxBytesPerSecond, a.now())
	if cfg.Peer.TLS != nil {
		a.peerTLS = certs.NewStore()
	}
	if cfg.Client.TLS != nil {
		a.clientTLS = certs.NewStore()
	}
	a.recordLimits = record.Limits{
		MaxBatchBytes:  maxBatchBytes(cfg),
		MaxRecordBytes: int(cfg.Limits.MaxRecordBytes),
	}
	a.decoders.New = func() any { return record.NewDecoder(a.recordLimits) }
	a.logDecoders.New = func() any { return record.NewDecoder(record.Limits{MaxBatchBytes: a.recordLimits.MaxBatchBytes}) }
	if cfg.Producer.Linger > 0 {
		a.coalesce = newCoalescer(cfg.Producer.Linger, int(min(cfg.Producer.MaxBatchBytes, int64(maxBatchBytes(cfg)))), &a.decoders,
			func(key groupKey, batch []byte, count int, deadline time.Time) (produceResponse, *reply.APIError) {
				return a.produceBatch(key.topic, key.partition, batch, count, key.acks, deadline)
			})
		a.coalesce.produceGroup = func(key groupKey, batches [][]byte, counts []int, deadline time.Time) ([]produceResponse, []*reply.APIError) {
			return a.produceIdempotentGroup(key.topic, key.partition, batches, counts, key.acks, deadline)
		}
	}
	if cfg.Producer.SidecarIdempotence {
		a.lanes = newLanes(func(ctx context.Context) (int64, int16, error) { return coord.AllocateProducerID(ctx) })
	}
	a.agents = newDirectory(func(ctx context.Context) ([]election.AgentInfo, error) {
		return a.coord.Agents(ctx)
	}, log.Named("agents"), a.now)
	a.metrics = metrics.New(a.metricsSources())
	// One cache for every log of the agent: the limit is per process.
	soft, ok := partition.SoftFileLimit()
	if !ok {
		soft = 4 * segstore.DefaultMaxOpenFiles
	}
	a.files = segstore.NewFileCache(partition.FileCacheBound(soft))
	return a
}

// maxBatchBytes bounds one batch in a partition log. It never goes below
// segstore's default, so that lowering limits.max_request_bytes cannot make
// recovery refuse batches written before.
func maxBatchBytes(cfg *config.Config) int {
	return max(segstore.DefaultMaxBatchBytes, int(cfg.Limits.MaxRequestBytes))
}

// fetchBodyLimit bounds the body of a fetch answer from another agent,
// replicated or proxied: a fetch's max bytes or one whole batch, whichever
// is larger, with room to spare.
func fetchBodyLimit(cfg *config.Config) int {
	return int(proxiedFetchMaxBytes(cfg)) + 64<<10
}

// proxiedFetchMaxBytes is the most a consumer fetch sent on to the leader
// (the HTTP fetch proxy, the Kafka listener's leaderFetch) asks for: the
// leader's answer, at most that or its first batch, then fits
// fetchBodyLimit. A consumer's max_bytes above it is lowered to it.
func proxiedFetchMaxBytes(cfg *config.Config) int64 {
	return max(cfg.Replication.FetchMaxBytes, int64(maxBatchBytes(cfg)))
}

// durability maps the configuration's durability to the protocol's.
func durability(d config.Durability) replicate.Durability {
	if d == config.DurabilityReplicated {
		return replicate.DurabilityReplicated
	}
	return replicate.DurabilityFsync
}

func (a *Agent) replicaDeps(dataDir string) *partition.Deps {
	return &partition.Deps{
		Self:            a.cfg.NodeID,
		Config:          a.cfg,
		Coord:           a.coord,
		Peers:           peer.NewClients(string(a.peerToken), fetchBodyLimit(a.cfg), false, a.peerTLSFor()),
		LookupAgent:     a.agents.lookup,
		Log:             a.log,
		Now:             a.now,
		FS:              a.fs,
		Durability:      durability(a.cfg.Storage.Durability),
		ProducerOptions: producer.Options{Expiration: a.cfg.Producer.IDExpiration, MaxProducers: a.cfg.Producer.MaxPerPartition},
		Hooks:           partition.Hooks{LeaderElected: a.metrics.LeaderElected, ISRChanged: a.metrics.ISRChanged, LoopWoke: a.metrics.ReplicaLoopWoke},
		LogOptions:      a.logOptions(),
	}
}

// logOptions are the partition logs' options from the storage block, which
// a topic's own storage settings override (partition.LogOptionsFor).
func (a *Agent) logOptions() segstore.Options {
	return segstore.Options{
		SegmentBytes:       a.cfg.Storage.SegmentBytes,
		SegmentAge:         a.cfg.Storage.SegmentAge,
		IndexIntervalBytes: int(a.cfg.Storage.IndexIntervalBytes),
		MaxBatchBytes:      maxBatchBytes(a.cfg),
		Retention:          a.cfg.Storage.Retention,
		RetentionBytes:     a.cfg.Storage.RetentionBytes,
		Now:                a.now,
		OnSync:             a.metrics.ObserveFsync,
		Files:              a.files,
	}
}

// Run opens the data directory, starts the listeners, registers with
// Consul, opens the partitions the metadata assigns here and serves until
// ctx is cancelled; then it stops gracefully: hand leaderships over and
// deregister, close the listeners, close the partition logs, mark a clean
// shutdown, release the data directory. ready, if not nil, is called once
// the agent serves.
func (a *Agent) Run(ctx context.Context, ready func()) (err error) {
	if a.peerToken, err = readToken(a.cfg.Peer.TokenFile); err != nil {
		return err
	}
	if a.clientToken, err = readToken(a.cfg.Client.TokenFile); err != nil {
		return err
	}
	if err := a.loadTLS(); err != nil {
		return err
	}
	for _, w := range a.cfg.Warnings() {
		a.log.Warn(w)
	}
	if a.cfg.Client.Pprof {
		defer enableContentionProfiles()()
	}
	dir, err := partition.OpenDataDir(a.fs, a.cfg.DataDir, a.cfg.NodeID)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := dir.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("agent: release data directory: %w", cerr)
		}
	}()
	a.log.Info("data directory open", "path", dir.Path, "clean_shutdown", dir.CleanShutdown)
	replicated := a.cfg.Storage.Durability == config.DurabilityReplicated
	if dir.LostPageCache && (replicated || dir.ReplicatedBefore) {
		// Acknowledged records may have been in the page cache only.
		n, err := dir.MarkAllDataLoss()
		if err != nil {
			return err
		}
		a.log.Warn("the host restarted while the agent ran and durability is \"replicated\": every partition counts as having lost data and fetches it again before it may lead or count as in sync",
			"partitions", n)
	}
	if err := dir.RecordBoot(replicated); err != nil {
		// Not fatal (a full disk must not keep the agent from serving its
		// reads): a boot id left from an earlier boot can only make a later
		// start count a clean restart as a lost page cache, the safe way.
		a.log.Warn("cannot record the boot id: a reboot while the agent runs may go unnoticed until it can", "error", err)
	}

	clientLn, err := net.Listen("tcp", a.cfg.Client.Address)
	if err != nil {
		return fmt.Errorf("agent: client API: %w", err)
	}
	peerLn, err := net.Listen("tcp", a.cfg.Peer.Address)
	if err != nil {
		clientLn.Close()
		return fmt.Errorf("agent: peer API: %w", err)
	}

	// The Kafka listener opens with the others, so a port in use fails the
	// start; its requests are refused until the agent serves.
	kafkaBroker := a.newKafkaBroker()
	var kafkaLn net.Listener
	var kafkaSrv *kafka.Server
	if a.cfg.Kafka.Address != "" {
		kcfg, err := a.kafkaConfig(kafkaBroker)
		if err == nil {
			kafkaLn, err = net.Listen("tcp", a.cfg.Kafka.Address)
		}
		if err != nil {
			clientLn.Close()
			peerLn.Close()
			return fmt.Errorf("agent: Kafka listener: %w", err)
		}
		kafkaSrv = kafka.NewServer(kcfg)
	}

	httpLog := a.log.Named("http").StandardLogger(&hclog.StandardLoggerOptions{InferLevels: true})
	peerAPI := a.newPeerAPI()
	clientRt, peerRt := a.clientRoutes(), a.peerRoutes(peerAPI)
	clientSrv := newServer(clientRt, a.closeWhenStopping(clientRt.handle), a.cfg.Limits.MaxRequestBytes, httpLog)
	peerSrv := newServer(peerRt, a.closeWhenStopping(peerRt.handle), a.cfg.Limits.MaxRequestBytes, httpLog)
	if a.clientTLS != nil {
		clientSrv.WriteBufferSize = peer.TLSWriteBufferSize
	}
	if a.peerTLS != nil {
		peerSrv.WriteBufferSize = peer.TLSWriteBufferSize
	}

	var wg sync.WaitGroup
	serveErr := make(chan error, 3)
	serve := func(name string, srv *fasthttp.Server, ln net.Listener) {
		defer wg.Done()
		if err := srv.Serve(ln); err != nil {
			serveErr <- fmt.Errorf("agent: %s API stopped: %w", name, err)
		}
	}
	wg.Add(2)
	// Out of descriptors, an accept fails until some are freed: the
	// listeners wait and retry instead of ending the agent.
	go serve("client", clientSrv, withTLS(newRetryListener(clientLn, "client", a.log.Named("http"), a.now), a.clientTLS))
	go serve("peer", peerSrv, withTLS(newRetryListener(peerLn, "peer", a.log.Named("http"), a.now), a.peerTLS))
	if kafkaSrv != nil {
		wg.Go(func() {
			if err := kafkaSrv.Serve(newRetryListener(kafkaLn, "kafka", a.log.Named("kafka"), a.now)); err != nil {
				serveErr <- fmt.Errorf("agent: Kafka listener stopped: %w", err)
			}
		})
		a.log.Info("Kafka listener", "address", kafkaLn.Addr().String(), "advertise", a.cfg.Kafka.AdvertiseAddress, "broker_id", kafkabroker.NodeID(a.cfg.NodeID))
	}
	a.log.Info("listening", "client", clientLn.Addr().String(), "peer", peerLn.Addr().String(),
		"peer_advertise", a.cfg.Peer.AdvertiseAddress, "client_tls", a.clientTLS != nil, "peer_tls", a.peerTLS != nil,
		"client_token", len(a.clientToken) > 0, "peer_token", len(a.peerToken) > 0)

	deps := a.replicaDeps(dir.Path)
	deps.AnnounceLeadership = peerAPI.AnnounceLeadership
	a.replicas = partition.NewManager(deps, dir.Path)
	a.forwarder = newForwarder(a.peerToken, a.peerTLSFor())
	a.fetchProxy = peer.NewClients(string(a.clientToken), fetchBodyLimit(a.cfg), true, a.clientAPITLSFor())
	a.clientAPIs = peer.NewClients(string(a.clientToken), fetchBodyLimit(a.cfg), false, a.clientAPITLSFor())
	a.groupRouter = a.newGroupRouter(peer.NewClients(string(a.peerToken), fetchBodyLimit(a.cfg), false, a.peerTLSFor()))
	a.groups = groupcoord.New(groupcoord.Config{
		Partitions:       a.cfg.Groups.OffsetsPartitions,
		Host:             a.groupRouter.Host(),
		Store:            a.coord,
		Now:              a.now,
		Logger:           a.log.Named("groups"),
		Limits:           a.recordLimits,
		OffsetsRetention: a.cfg.Groups.OffsetsRetention,
		MaxStateBytes:    election.MaxGroupStateBytes,
	})
	runErr := a.join(ctx)
	if runErr == nil {
		a.waitingFor.Store("opening partitions")
		if err := a.agents.refresh(ctx); err != nil {
			a.log.Warn("cannot list agents yet", "error", err)
		}
		a.agents.start(agentsRefreshInterval)
		runErr = a.replicas.Start(ctx, func(ctx context.Context) (*election.Snapshot, error) {
			snap, err := a.coord.WaitMetadata(ctx, 1)
			if err == nil {
				// Before the opens, so that a warning comes ahead of
				// their failures.
				partition.CheckFileLimit(a.log, a.fs, snap, a.cfg.NodeID, dir.Path, a.files)
			}
			return snap, err
		})
	}
	served := runErr == nil
	if runErr == nil {
		a.state.Store(stateServing)
		a.log.Info("agent ready", "node_id", a.cfg.NodeID)
		if err := sdNotify("READY=1"); err != nil {
			a.log.Warn("cannot notify systemd", "error", err)
		}
		if ready != nil {
			ready()
		}
		select {
		case <-ctx.Done():
		case runErr = <-serveErr:
		}
	}

	if a.state.Load() == stateServing {
		a.state.Store(stateHandingOver)
	}
	a.log.Info("stopping")
	if err := sdNotify("STOPPING=1"); err != nil {
		a.log.Warn("cannot notify systemd", "error", err)
	}
	if errors.Is(runErr, context.Canceled) {
		runErr = nil // stopped while starting: a signal, not a failure
	}
	// Leaderships go first, each handed to an in-sync follower that holds
	// its whole log while the APIs still serve; a leader stops appending
	// before it releases its lock, so no write lands in a leadership
	// another agent may already hold.
	hctx, cancel := context.WithTimeout(context.Background(), stopTimeout)
	if a.state.Load() == stateHandingOver {
		// The sidecar forwards to the successors from now on: its
		// directory must have them, even those that registered since
		// its last refresh (an agent restarted just before).
		rctx, cancelRefresh := context.WithTimeout(hctx, time.Second)
		if err := a.agents.refresh(rctx); err != nil {
			a.log.Warn("cannot list agents before handing leaderships over", "error", err)
		}
		cancelRefresh()
	}
	a.replicas.RetireAll(hctx)
	cancel()
	// New requests are refused from here on; a produce in flight may go
	// on retrying on the new leader a little longer.
	retriesUntil := a.now().Add(retryGrace)
	a.retriesUntil.Store(&retriesUntil)
	a.state.Store(stateStopping)
	a.log.Info("leaderships handed over; leaving Consul")
	dctx, cancel := context.WithTimeout(context.Background(), stopTimeout)
	if err := a.coord.Close(dctx); err != nil {
		a.log.Warn("leaving Consul failed; its TTL check will turn critical", "error", err)
	}
	cancel()
	close(a.stopping)
	// Both at once: each polls its open connections every 100ms.
	sctx, cancelShutdown := context.WithTimeout(context.Background(), stopTimeout)
	var shutdowns sync.WaitGroup
	for _, srv := range []*fasthttp.Server{clientSrv, peerSrv} {
		shutdowns.Go(func() {
			if err := srv.ShutdownWithContext(sctx); err != nil {
				a.log.Warn("listener did not close in time", "error", err)
			}
		})
	}
	if kafkaSrv != nil {
		// Close ends its connections and waits for their requests.
		shutdowns.Go(func() {
			if err := kafkaSrv.Close(); err != nil {
				a.log.Warn("Kafka listener did not close cleanly", "error", err)
			}
		})
	}
	shutdowns.Wait()
	cancelShutdown()
	// Fetch sessions are no listener's: they end here, before the
	// partitions they hold fetches of.
	peerAPI.Close()
	wg.Wait()
	kafkaBroker.Wait()
	// Each replica's stop waits for its goroutines, peer requests in
	// flight included (see partition.Replica.Stop for the bound). The
	// directory goes after them: their loops look agents up until they end.
	a.groups.Close()
	closeErr := a.replicas.Stop()
	a.agents.stop()
	if runErr != nil {
		return runErr
	}
	if closeErr != nil {
		return fmt.Errorf("agent: partitions did not close cleanly: %w", closeErr)
	}
	if !dir.CleanShutdown && (!served || a.replicas.OfflineCount() > 0) {
		// The previous agent did not stop cleanly, and this one did not
		// open (recover, sync) and close every partition it left: their
		// unsynced pages are still only in the page cache. The next start
		// must see this stop as unclean too.
		a.log.Warn("stopped without having recovered every partition since an unclean stop: not marking a clean shutdown")
		a.log.Info("stopped")
		return nil
	}
	if err := dir.MarkCleanShutdown(); err != nil {
		return fmt.Errorf("agent: mark clean shutdown: %w", err)
	}
	a.log.Info("stopped")
	return nil
}

// join makes the agent known to the cluster.
func (a *Agent) join(ctx context.Context) error {
	a.waitingFor.Store("waiting for Consul")
	a.log.Info("connecting to Consul", "address", a.cfg.Consul.API.Address)
	if err := a.coord.WaitForConsul(ctx); err != nil {
		return err
	}
	a.waitingFor.Store("registering with Consul")
	if err := a.coord.Register(ctx); err != nil {
		return fmt.Errorf("agent: register with Consul: %w", err)
	}
	return nil
}

// agentsRefreshInterval is how often the agent directory is read again
// from Consul, besides the reads a lookup miss triggers.
const agentsRefreshInterval = 10 * time.Second

// The query parameters of the client API's routes that take any
// (docs/api.md); the others take none.
var (
	produceQuery = []string{"partition", "key", "acks", "timeout"}
	fetchQuery   = []string{"offset", "max_bytes", "wait", "last_fetched_epoch", "group", "member_id", "member_epoch", "reset"}
	groupQuery   = []string{"timeout"}
	offsetsQuery = []string{"timeout", "topic"}
)

func (a *Agent) clientRoutes() *router {
	rt := &router{onError: a.metrics.Error,
		guard: requireToken(a.clientToken, "logagent", "client API requests need the token (client.token_file)")}
	// Open without the token: systemd and load balancer probes carry none,
	// and the answer tells only the agent's state and node id.
	rt.addOpen(fasthttp.MethodGet, "/v1/health", a.handleHealth)
	rt.add(fasthttp.MethodGet, "/metrics", a.metricsHandler())
	rt.addAPI(fasthttp.MethodGet, "/v1/topics", nil, a.handleListTopics)
	rt.addAPI(fasthttp.MethodPost, "/v1/topics", nil, a.handleCreateTopic)
	rt.addAPI(fasthttp.MethodGet, "/v1/topics/{topic}", nil, a.handleDescribeTopic)
	rt.addAPI(fasthttp.MethodDelete, "/v1/topics/{topic}", nil, a.handleDeleteTopic)
	rt.addAPI(fasthttp.MethodPatch, "/v1/topics/{topic}", nil, a.handleAlterTopic)
	rt.addAPI(fasthttp.MethodGet, "/v1/status", nil, a.handleStatus)
	rt.addAPI(fasthttp.MethodPost, "/v1/topics/{topic}/records", produceQuery, a.handleProduce)
	rt.addAPI(fasthttp.MethodPost, "/v1/producers", nil, a.handleInitProducer)
	rt.addAPI(fasthttp.MethodGet, "/v1/topics/{topic}/partitions/{partition}/records", fetchQuery, a.handleFetch)
	rt.addAPI(fasthttp.MethodPost, "/v1/topics/{topic}/partitions/{partition}/reassignment", nil, a.handleStartReassign)
	rt.addAPI(fasthttp.MethodGet, "/v1/topics/{topic}/partitions/{partition}/reassignment", nil, a.handleGetReassign)
	rt.addAPI(fasthttp.MethodDelete, "/v1/topics/{topic}/partitions/{partition}/reassignment", nil, a.handleCancelReassign)
	rt.addAPI(fasthttp.MethodPost, "/v1/nodes/{node}/drain", nil, a.handleDrain(true))
	rt.addAPI(fasthttp.MethodDelete, "/v1/nodes/{node}/drain", nil, a.handleDrain(false))
	rt.addAPI(fasthttp.MethodGet, "/v1/nodes/{node}/drain", nil, a.handleGetDrain)
	rt.addAPI(fasthttp.MethodGet, "/v1/rebalance", nil, a.handleRebalancePlan)
	// The Go client sends every group request its deadline as timeout,
	// the listing's too, which has no use for it.
	rt.addAPI(fasthttp.MethodGet, "/v1/groups", groupQuery, a.handleListGroups)
	rt.addAPI(fasthttp.MethodGet, "/v1/groups/{group}", groupQuery, a.handleGroupOp("describe"))
	rt.addAPI(fasthttp.MethodDelete, "/v1/groups/{group}", groupQuery, a.handleGroupOp("delete"))
	rt.addAPI(fasthttp.MethodPost, "/v1/groups/{group}/members", groupQuery, a.handleGroupOp("join"))
	rt.addAPI(fasthttp.MethodPost, "/v1/groups/{group}/members/{member}/heartbeat", groupQuery, a.handleGroupOp("heartbeat"))
	rt.addAPI(fasthttp.MethodDelete, "/v1/groups/{group}/members/{member}", groupQuery, a.handleGroupOp("leave"))
	rt.addAPI(fasthttp.MethodPost, "/v1/groups/{group}/offsets", groupQuery, a.handleGroupOp("commit"))
	rt.addAPI(fasthttp.MethodGet, "/v1/groups/{group}/offsets", offsetsQuery, a.handleGroupOp("offsets"))
	rt.addAPI(fasthttp.MethodPost, "/v1/groups/{group}/offsets/reset", groupQuery, a.handleGroupOp("reset"))
	// The status page: the router ignores a trailing slash, so "/ui" takes
	// "/ui/" too and the page's handler tells them apart; it answers 404
	// for any file it does not have.
	// The page's own files hold no data and are open, so a browser, which
	// cannot send the bearer token by itself, loads the page; the page asks
	// for the token when its state answers 401 and sends it from then on.
	page := ui.New(newUISource(a))
	rt.addOpen(fasthttp.MethodGet, ui.PathRedirect, page.Serve)
	rt.addOpen(fasthttp.MethodGet, "/ui/{file}", page.Serve)
	rt.add(fasthttp.MethodGet, ui.PathState, page.Serve)
	if a.cfg.Client.Pprof {
		rt.add(fasthttp.MethodGet, "/debug/pprof", pprofhandler.PprofHandler)
		rt.add(fasthttp.MethodGet, "/debug/pprof/{profile}", pprofhandler.PprofHandler)
	}
	return rt
}

// Sampling of the mutex and block profiles while client.pprof is on: Go
// records neither by default, so /debug/pprof/mutex and /block would be
// empty. One contention event in mutexProfileFraction, and blocking events
// by time (one sample per blockProfileRate spent blocked, every event at
// least that long), keep the cost low on the produce and fetch paths,
// which block on channels and locks at every request.
const (
	mutexProfileFraction = 100
	blockProfileRate     = int(time.Millisecond)
)

// enableContentionProfiles turns the mutex and block profiles' sampling
// on for the process and returns what turns it off again.
func enableContentionProfiles() (restore func()) {
	previous := runtime.SetMutexProfileFraction(mutexProfileFraction)
	runtime.SetBlockProfileRate(blockProfileRate)
	return func() {
		runtime.SetMutexProfileFraction(previous)
		runtime.SetBlockProfileRate(0)
	}
}

func (a *Agent) peerRoutes(peerAPI *peerapi.Server) *router {
	rt := &router{}
	// Health is open, as on the client API: the peer address is the one a
	// probe on another host can reach (the client API belongs on loopback),
	// probes carry no secret, and it tells only the state and the node id.
	// peer.tls still wants the probe's client certificate first.
	rt.add(fasthttp.MethodGet, "/v1/health", a.handleHealth)
	rt.add(fasthttp.MethodGet, peer.FetchPath, a.requirePeerToken(peerAPI.HandleReplicaFetch))
	rt.add(fasthttp.MethodGet, peer.SessionPath, a.requirePeerToken(peerAPI.HandleReplicaSession))
	rt.add(fasthttp.MethodGet, peer.EpochEndOffsetPath, a.requirePeerToken(peerAPI.HandleEpochEndOffset))
	rt.add(fasthttp.MethodPost, peerProducePath, a.requirePeerToken(a.handleReplicaProduce))
	rt.add(fasthttp.MethodPost, groups.PeerPath, a.requirePeerToken(a.handlePeerGroupOp))
	return rt
}

// closeWhenStopping makes every answer of a stopping agent close its
// connection: clients and other agents' sidecars send their next request
// on a new one, which the closed listener refuses cleanly, instead of on a
// kept-alive connection the shutdown may close under it, leaving them an
// outcome they cannot know.
func (a *Agent) closeWhenStopping(h fasthttp.RequestHandler) fasthttp.RequestHandler {
	return func(ctx *fasthttp.RequestCtx) {
		h(ctx)
		// A fetch session opened during the handovers serves on: the
		// successors catch up through it.
		if a.state.Load() >= stateHandingOver && !ctx.Hijacked() {
			ctx.SetConnectionClose()
		}
	}
}

type healthResponse struct {
	Status string `json:"status"`
	NodeID string `json:"node_id"`
}

// handleHealth answers 200 while the agent serves, 503 while it starts or
// stops, so a load balancer or systemd probe sees the truth.
func (a *Agent) handleHealth(ctx *fasthttp.RequestCtx) {
	switch a.state.Load() {
	case stateServing:
		reply.WriteJSON(ctx, fasthttp.StatusOK, healthResponse{Status: "ok", NodeID: a.cfg.NodeID})
	case stateStarting:
		reply.WriteError(ctx, fasthttp.StatusServiceUnavailable, wire.CodeServiceUnavailable,
			"agent is starting: "+a.waitingFor.Load().(string), true)
	default:
		reply.WriteError(ctx, fasthttp.StatusServiceUnavailable, wire.CodeServiceUnavailable, "agent is stopping", true)
	}
}
