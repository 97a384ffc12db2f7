package partition

// A topic's settings that change at run time (logagent topic alter,
// docs/design.md §3): min_insync_replicas, which the leader applies, and
// the retention limits of its storage settings, which every replica's log
// applies. The manager takes a replica offline instead when the storage
// settings are ones this agent cannot apply (Manager.apply).

// applyTopicStorage puts the topic's retention limits on the open log and
// applies them now, not at the next retention tick, once the storage
// settings changed.
func (r *Replica) applyTopicStorage() {
	opts, err := LogOptionsFor(r.deps.LogOptions, r.meta.tc)
	if err != nil {
		return // the manager stops the replica (Manager.apply)
	}
	log := r.CurrentLog()
	log.SetRetention(opts.Retention, opts.RetentionBytes)
	r.log.Info("retention changed", "retention", opts.Retention, "retention_bytes", opts.RetentionBytes)
	r.retain()
}

// applyMinInsyncReplicas hands a leader a changed min_insync_replicas.
func (r *Replica) applyMinInsyncReplicas() {
	n := r.meta.tc.MinInsyncReplicas
	if !r.meta.usable || n == r.leader.MinInsyncReplicas() {
		return
	}
	was := r.leader.MinInsyncReplicas()
	if err := r.leader.SetMinInsyncReplicas(n); err != nil {
		r.log.Warn("cannot apply min_insync_replicas", "min_insync_replicas", n, "error", err)
		return
	}
	r.log.Info("min_insync_replicas changed", "min_insync_replicas", n, "was", was, "isr", r.leader.ISR())
	r.processLeaderReady()
}
