package config

// The file schema. Every field is optional (a pointer or a pointer to a
// block) so that merging can tell "not set in this file" from a zero value.
// Sizes and durations are strings ("1GiB", "10s"); a bare number is accepted
// for a size and means bytes.

type fileRoot struct {
	NodeID        *string            `hcl:"node_id,optional"`
	DataDir       *string            `hcl:"data_dir,optional"`
	LogLevel      *string            `hcl:"log_level,optional"`
	LogJSON       *bool              `hcl:"log_json,optional"`
	Client        *fileClient        `hcl:"client,block"`
	Kafka         *fileKafka         `hcl:"kafka,block"`
	Peer          *filePeer          `hcl:"peer,block"`
	Consul        *fileConsul        `hcl:"consul,block"`
	Storage       *fileStorage       `hcl:"storage,block"`
	Replication   *fileReplication   `hcl:"replication,block"`
	Producer      *fileProducer      `hcl:"producer,block"`
	Limits        *fileLimits        `hcl:"limits,block"`
	TopicDefaults *fileTopicDefaults `hcl:"topic_defaults,block"`
	Groups        *fileGroups        `hcl:"groups,block"`
	Cluster       *fileCluster       `hcl:"cluster,block"`
}

type fileCluster struct {
	ReplaceDeadAfter *string `hcl:"replace_dead_after,optional"`
}

type fileGroups struct {
	OffsetsPartitions        *int    `hcl:"offsets_partitions,optional"`
	OffsetsReplicationFactor *int    `hcl:"offsets_replication_factor,optional"`
	OffsetsRetention         *string `hcl:"offsets_retention,optional"`
}

type fileClient struct {
	Address   *string  `hcl:"address,optional"`
	Pprof     *bool    `hcl:"pprof,optional"`
	TokenFile *string  `hcl:"token_file,optional"`
	TLS       *fileTLS `hcl:"tls,block"`
}

type fileKafka struct {
	Address          *string `hcl:"address,optional"`
	AdvertiseAddress *string `hcl:"advertise_address,optional"`
}

type filePeer struct {
	Address          *string  `hcl:"address,optional"`
	AdvertiseAddress *string  `hcl:"advertise_address,optional"`
	TokenFile        *string  `hcl:"token_file,optional"`
	TLS              *fileTLS `hcl:"tls,block"`
}

type fileTLS struct {
	CertFile *string `hcl:"cert_file,optional"`
	KeyFile  *string `hcl:"key_file,optional"`
	CAFile   *string `hcl:"ca_file,optional"`
}

type fileConsul struct {
	Address    *string `hcl:"address,optional"`
	Scheme     *string `hcl:"scheme,optional"`
	Datacenter *string `hcl:"datacenter,optional"`
	Token      *string `hcl:"token,optional"`
	TokenFile  *string `hcl:"token_file,optional"`
	CAFile     *string `hcl:"ca_file,optional"`
	CertFile   *string `hcl:"cert_file,optional"`
	KeyFile    *string `hcl:"key_file,optional"`
	Prefix     *string `hcl:"prefix,optional"`
	SessionTTL *string `hcl:"session_ttl,optional"`
	CheckTTL   *string `hcl:"check_ttl,optional"`
	LockDelay  *string `hcl:"lock_delay,optional"`
}

type fileStorage struct {
	SegmentBytes       *string `hcl:"segment_bytes,optional"`
	SegmentAge         *string `hcl:"segment_age,optional"`
	IndexIntervalBytes *string `hcl:"index_interval_bytes,optional"`
	Durability         *string `hcl:"durability,optional"`
	Retention          *string `hcl:"retention,optional"`
	RetentionBytes     *string `hcl:"retention_bytes,optional"`
}

type fileReplication struct {
	LagTimeMax    *string `hcl:"lag_time_max,optional"`
	FetchMaxWait  *string `hcl:"fetch_max_wait,optional"`
	FetchMaxBytes *string `hcl:"fetch_max_bytes,optional"`
	// AutoLeaderRebalance is a pointer so that its default can be true.
	AutoLeaderRebalance       *bool   `hcl:"auto_leader_rebalance,optional"`
	LeaderRebalanceDelay      *string `hcl:"leader_rebalance_delay,optional"`
	ReassignMaxBytesPerSecond *string `hcl:"reassign_max_bytes_per_second,optional"`
}

type fileProducer struct {
	Linger          *string `hcl:"linger,optional"`
	MaxBatchBytes   *string `hcl:"max_batch_bytes,optional"`
	IDExpiration    *string `hcl:"id_expiration,optional"`
	MaxPerPartition *int    `hcl:"max_per_partition,optional"`
	// SidecarIdempotence is a pointer so that its default can be true.
	SidecarIdempotence *bool `hcl:"sidecar_idempotence,optional"`
}

type fileLimits struct {
	MaxRecordBytes  *string `hcl:"max_record_bytes,optional"`
	MaxRequestBytes *string `hcl:"max_request_bytes,optional"`
}

type fileTopicDefaults struct {
	Partitions            *int  `hcl:"partitions,optional"`
	ReplicationFactor     *int  `hcl:"replication_factor,optional"`
	MinInsyncReplicas     *int  `hcl:"min_insync_replicas,optional"`
	UncleanLeaderElection *bool `hcl:"unclean_leader_election,optional"`
}
