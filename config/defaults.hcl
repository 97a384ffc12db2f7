# Built-in defaults: the first configuration source, embedded in the binary.
# Every key that has a default is here; agent.hcl documents each one.
# node_id has no static default: when no source sets it, the host name is used.

data_dir  = "/var/lib/logagent"
log_level = "info"
log_json  = false

client {
  address = "127.0.0.1:7070"
  pprof   = false
}

kafka {
  address = ""
}

peer {
  address    = "0.0.0.0:7171"
  token_file = ""
}

consul {
  prefix      = "logagent/"
  session_ttl = "10s"
  check_ttl   = "3s"
  lock_delay  = "250ms"
}

storage {
  segment_bytes        = "1GiB"
  segment_age          = "168h"
  index_interval_bytes = 4096
  durability           = "fsync"
  retention            = "168h"
  retention_bytes      = 0
}

replication {
  lag_time_max           = "10s"
  fetch_max_wait         = "500ms"
  fetch_max_bytes        = "8MiB"
  auto_leader_rebalance  = true
  leader_rebalance_delay = "10s"
  reassign_max_bytes_per_second = "50MiB"
}

producer {
  linger              = "1ms"
  max_batch_bytes     = "1MiB"
  id_expiration       = "168h"
  max_per_partition   = 100000
  sidecar_idempotence = true
}

limits {
  max_record_bytes  = "1MiB"
  max_request_bytes = "16MiB"
}

groups {
  offsets_partitions         = 8
  offsets_replication_factor = 3
  offsets_retention          = "168h"
}

cluster {
  replace_dead_after = "10m"
}

topic_defaults {
  partitions              = 3
  replication_factor      = 3
  min_insync_replicas     = 2
  unclean_leader_election = false
}
