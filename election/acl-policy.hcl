# Least-privilege Consul ACL policy for a logagent agent with the default
# prefix "logagent/" (adjust key_prefix if consul.prefix differs). Create it
# and a token for each agent with:
#
#   consul acl policy create -name logagent -rules @acl-policy.hcl
#   consul acl token create -description "logagent on $(hostname)" -policy-name logagent
#
# and give the token to the agent through CONSUL_HTTP_TOKEN(_FILE) or the
# consul.token setting.

# Topic metadata, leader locks, partition state, the producer id counter,
# producer epochs and consumer groups' states (election/keys.go).
key_prefix "logagent/" {
  policy = "write"
}

# The agent's session is created on its Consul node.
session_prefix "" {
  policy = "write"
}

# Register service "logagent-<node_id>", pass its TTL check, deregister it.
service_prefix "logagent" {
  policy = "write"
}

# Discover the other agents through the health API, which hides services
# on nodes the token cannot read.
node_prefix "" {
  policy = "read"
}
