# logagent agent configuration: every option, set to its default.
#
# Install as /etc/logagent.d/agent.hcl. The agent reads every *.hcl file of
# each -config directory in name order (a directory without one is an
# error); a later file overrides only the keys it sets. Check a configuration with: logagent validate -config=/etc/logagent.d/
#
# Sizes are bytes, or a number with a unit: KB, MB, GB, TB (powers of 1000) or
# KiB, MiB, GiB, TiB (powers of 1024). Durations use Go's syntax: "500ms",
# "10s", "168h".
#
# A relative path (data_dir, the token and TLS files, a unix:// Consul
# address) is read from the directory of the file that sets it, never from
# the agent's working directory (/ under systemd).

# The agent's identity in the cluster: 1 to 64 letters, digits, '-' or '_'.
# Defaults to the first label of the host name. It is written into
# data_dir/meta.json on first start, and the agent refuses to start on a data
# directory that belongs to another node_id.
# node_id = "host-1"

# Where partitions, checkpoints and meta.json live, created at start when
# absent (a path that exists must be a directory). The agent holds an
# exclusive lock (data_dir/.lock) while it runs.
data_dir = "/var/lib/logagent"

# trace, debug, info, warn or error. SIGHUP re-reads the configuration and
# applies a changed log_level and the TLS files; other changes need a restart
# (a reload logs a warning naming them).
log_level = "info"

# Log as JSON lines instead of text.
log_json = false

# The sidecar API that applications use (docs/design.md §8). Keep it on
# loopback unless it has a token (and TLS): the agent warns when it listens
# beyond loopback without one.
client {
  address = "127.0.0.1:7070"

  # A file holding a bearer token. When set, every request but GET
  # /v1/health and the status page's files (/ui/, /ui/app.js, /ui/style.css)
  # must carry "Authorization: Bearer <token>" (401 otherwise).
  # Empty means no authentication. Read at start; a change needs a restart.
  # token_file = "/etc/logagent.d/tls/client-token"

  # HTTPS on the client API: the certificate (PEM, leaf first) and its key;
  # with ca_file, clients must present a certificate that CA signed. SIGHUP
  # loads the files again. See docs/operations.md, "TLS and tokens".
  # tls {
  #   cert_file = "/etc/logagent.d/tls/host-1.pem"
  #   key_file  = "/etc/logagent.d/tls/host-1-key.pem"
  #   ca_file   = "/etc/logagent.d/tls/ca.pem"
  # }

  # Serve Go's runtime profiles at /debug/pprof/ on this address (CPU,
  # heap, allocations, goroutines, execution traces, and mutex and block
  # profiles, whose sampling this turns on: docs/operations.md, "Profiling"), for
  # `go tool pprof http://127.0.0.1:7070/debug/pprof/profile?seconds=30`.
  # Anyone who can reach the address can read them.
  pprof = false
}

# The Kafka wire protocol (docs/kafka.md): Kafka clients and tools on this
# host use bootstrap.servers=127.0.0.1:9092 and get the sidecar, which
# presents itself as the one broker of the cluster and forwards inside it as
# the client API does. Empty turns it off. It has neither TLS nor a token:
# keep it on loopback (the agent warns otherwise, and when client.token_file
# is set, since Kafka clients bypass that token).
kafka {
  address = ""

  # The address Metadata and FindCoordinator answer with, which clients dial
  # after their bootstrap address. Defaults to address; required when
  # address listens on every interface (0.0.0.0 or [::]).
  # Another listener's address (client.address, peer.address) is refused.
  # advertise_address = "127.0.0.1:9092"
}

# The API between agents: replication and forwarded produce requests.
peer {
  address = "0.0.0.0:7171"

  # What other agents dial. Defaults to address when that names a host; when
  # address listens on every interface (0.0.0.0 or [::]), to the host's only
  # global unicast IPv4 address (set it when the host has several).
  # Another listener's address (client.address, kafka.address) is refused.
  # advertise_address = "10.0.0.11:7171"

  # A file holding a shared secret. When set, every peer request but GET
  # /v1/health must carry "Authorization: Bearer <secret>". Empty means no
  # authentication.
  # The agent warns when address is beyond loopback with neither this nor
  # tls set, as it is by default: anyone who reaches the port can read and
  # write every partition and pose as a follower.
  token_file = ""

  # Mutual TLS between agents: the listener and this agent's peer clients
  # present cert_file (it needs both serverAuth and clientAuth uses, and the
  # advertised address among its names) and accept only certificates that
  # ca_file signed. All three files are required. SIGHUP loads them again.
  # Without it peer traffic is plaintext: keep the peer network private.
  # tls {
  #   cert_file = "/etc/logagent.d/tls/host-1.pem"
  #   key_file  = "/etc/logagent.d/tls/host-1-key.pem"
  #   ca_file   = "/etc/logagent.d/tls/ca.pem"
  # }
}

# How the agent reaches Consul. Keys left out fall back to the CONSUL_*
# environment variables (CONSUL_HTTP_ADDR, CONSUL_HTTP_TOKEN,
# CONSUL_HTTP_TOKEN_FILE, CONSUL_HTTP_SSL, CONSUL_CACERT, CONSUL_CLIENT_CERT,
# CONSUL_CLIENT_KEY), then to 127.0.0.1:8500 over http.
consul {
  # host[:port], optionally after http://, https:// or unix://
  # address    = "127.0.0.1:8500"
  # scheme     = "http"
  # datacenter = "dc1"
  # token      = ""      # or token_file; see docs/operations.md for the ACL policy
  # token_file = "/etc/logagent.d/consul-token"   # an empty file is refused
  # ca_file    = ""      # the three TLS files need scheme = "https" (refused over http,
  # cert_file  = ""      # where Consul's client would ignore them); cert_file and
  # key_file   = ""      # key_file go together; all are read and parsed at load

  # Every key logagent writes lives under this KV prefix.
  prefix = "logagent/"

  # The agent's Consul session: it holds the partition leadership locks.
  # 2s to 24h; Consul's server also refuses TTLs below its session_ttl_min
  # (10s by default).
  session_ttl = "10s"

  # The TTL check the agent passes every third of this (2s to 24h); the
  # session is linked to it, so a crashed agent loses its leaderships within
  # about this time.
  check_ttl = "3s"

  # How long Consul refuses a lock after its holder's session was
  # invalidated (not after a voluntary release). 1ms to 60s. Two leaders are
  # kept apart by the agent's local lease, which ends before Consul can
  # invalidate the session; the delay only covers a leader that stalled right
  # at its deadline. Crash failover takes about check_ttl*5/6 + lock_delay.
  lock_delay = "250ms"
}

storage {
  # A partition's active segment rolls at this size (4KiB to 2GiB) ...
  segment_bytes = "1GiB"
  # ... or at this age, whichever comes first.
  segment_age = "168h"

  # One sparse index entry per this many bytes of log.
  index_interval_bytes = 4096

  # "fsync": a write is acknowledged only once fsynced on every in-sync
  # replica, so it survives every host losing power at once.
  # "replicated": acknowledged once in the in-sync replicas' memory; it
  # survives the loss of all but one of them, not a simultaneous power loss.
  durability = "fsync"

  # Whole segments older than this are deleted; "0s" keeps them regardless of age.
  retention = "168h"
  # Oldest segments are deleted while a partition is larger; 0 means no bound.
  retention_bytes = 0
}

replication {
  # A follower that has not caught up for this long leaves the ISR. One whose
  # agent Consul reports dead (check critical, registration gone) leaves at once.
  lag_time_max = "10s"
  # How long a caught-up follower's fetch waits for new data (long poll).
  # 1ms to 30s (what leaders take), and below lag_time_max.
  fetch_max_wait = "500ms"
  # The most bytes one replica fetch returns (at least one whole batch).
  fetch_max_bytes = "8MiB"
  # After failovers, move each partition's leadership back to its preferred
  # replica (the first of its replica list), with the same handover as a
  # graceful stop, so that leaders spread over the agents again (Kafka's
  # auto.leader.rebalance.enable). One move at a time per agent, at most one
  # every two seconds.
  auto_leader_rebalance = true
  # How long the preferred replica must have been in the ISR before the
  # leadership moves back to it, so that a flapping agent does not bounce
  # leaderships (1s to 24h).
  leader_rebalance_delay = "10s"
  # The most bytes per second this agent's leaders send, summed, to the
  # replicas a reassignment adds while they catch up (logagent partition
  # move); the ISR's own fetches are never held back. "0" turns the bound
  # off; else 1KiB to 1TiB.
  reassign_max_bytes_per_second = "50MiB"
}

producer {
  # How long the sidecar waits to coalesce concurrent produce requests for
  # one partition into one forwarded batch (0s to 1s).
  linger = "1ms"
  # The largest coalesced batch. At most replication.fetch_max_bytes.
  max_batch_bytes = "1MiB"
  # How long a partition remembers an idempotent producer (its epoch and last
  # five batches) after the newest batch it wrote (Kafka's
  # producer.id.expiration.ms). A producer silent for longer starts over:
  # its resend of something older would be appended again.
  id_expiration = "168h"
  # The most idempotent producers a partition remembers: beyond it, the
  # least recently active are forgotten first, once a minute (and logged),
  # as if their id_expiration had passed; none that wrote within the last 2
  # minutes (its client may still resend). A producer takes about 160 bytes
  # of memory and 67 of the partition's producer snapshot. Clients that make
  # a producer per request or per process leave one behind each time.
  max_per_partition = 100000
  # Plain acks=all requests leave the sidecar with one of its own producer
  # ids, so that one whose outcome is unknown (a dropped connection to the
  # leader, a leader that stepped down after appending it) is sent again
  # within its timeout and written once. false sends them as they are: a
  # write whose outcome is unknown is answered 504/503 and not resent.
  sidecar_idempotence = true
}

limits {
  # The largest record a client may send, as the record's encoded length:
  # its key, value and header keys and values together and a few bytes of
  # varints, whatever the body's format.
  max_record_bytes = "1MiB"
  # The largest produce request body; larger ones are refused with 413
  # before they are read.
  max_request_bytes = "16MiB"
}

# Consumer groups keep their committed offsets in the internal topic
# __consumer_offsets, created on the first use of a group; the leader of the
# partition a group hashes to is its coordinator. The first two settings
# apply only when the topic is created: groups hash over its partitions.
groups {
  # Partitions of the offsets topic: how many agents can share the groups'
  # coordination (1 to 1000).
  offsets_partitions = 8
  # Replicas of each offsets partition; commits are acks=all writes to it.
  offsets_replication_factor = 3
  # Unlike the two above, applies to every group, not at the creation: a
  # group that has had no member, no commit and no offset reset for this
  # long is deleted with its committed offsets, as Kafka's
  # offsets.retention.minutes (checked every 10 minutes; a coordinator
  # failover starts the count again); "0s" keeps groups until they are
  # deleted, else at least "1m".
  offsets_retention = "168h"
}

# What the agents do for the cluster as a whole.
cluster {
  # Self-healing: once an agent has been dead this long (its Consul check
  # critical, or its registration gone), the leader of each partition it
  # holds a replica of moves that replica to a live agent that holds none of
  # the partition (the fewest replicas first), with the same reassignment as
  # logagent partition move; every partition returns to its replication
  # factor without an operator. Longer than a reboot or an upgrade, so that
  # maintenance does not copy whole partitions; short enough that a second
  # failure within it is unlikely. "0s" turns it off; else 1s to 168h.
  # A self-healing move whose added replica makes no progress for as long
  # (its agent died too, or never opened it) is cancelled by its leader and
  # placed again elsewhere; moves an operator started are never cancelled.
  replace_dead_after = "10m"
}

# Settings for topics created without them. A topic created with defaults has
# its replication_factor and min_insync_replicas capped by the number of
# agents at creation; a value named in the request is never capped.
topic_defaults {
  partitions              = 3
  replication_factor      = 3
  min_insync_replicas     = 2
  unclean_leader_election = false
}
