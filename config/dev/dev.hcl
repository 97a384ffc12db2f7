# Settings shared by the three agents of `logagent dev` (a local cluster on
# loopback). `logagent dev` adds a file per agent with its node_id, data_dir,
# addresses and the address of its Consul.

log_level = "info"

consul {
  # The dev Consul runs with session_ttl_min = "1s", so failover is quick.
  session_ttl = "5s"
  check_ttl   = "2s"
  lock_delay  = "100ms"
}

storage {
  # Small segments so rolling and retention can be watched on a laptop.
  segment_bytes = "64MiB"
  retention     = "24h"
}
