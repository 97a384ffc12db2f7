// Package election is logagent's only contact with Consul: it registers the
// agent as service "logagent" with a TTL check, keeps one session per agent
// with a local lease, stores topic metadata under a KV prefix, watches that
// prefix with one blocking query (and, for leaders, the agents' health with
// another: which agents Consul says are dead), elects partition leaders with
// KV locks and fences them with an epoch bumped by a guarded transaction, and
// changes the in-sync replica set with the same guarded transaction. It
// also hands out idempotent-producer ids, a block at a time from a counter
// moved with a CAS, and their epochs (ProducerIDs).
package election
