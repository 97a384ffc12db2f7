package agent

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strconv"
)

// The data directory's files as docs/design.md §5 lays them out, read the
// way an operator would, from outside the partition package.

const (
	cleanShutdownFileName = "clean_shutdown"
	orphanedDirName       = "orphaned"
	deletingDirName       = "deleting"
	replicaFileName       = "replica.json"
)

type replicaFile struct {
	Topic     string `json:"topic"`
	Partition int    `json:"partition"`
	TopicID   string `json:"topic_id"`
	DataLoss  bool   `json:"data_loss"`
}

func partitionDir(dataDir, topic string, partition int) string {
	return filepath.Join(dataDir, topic+"-"+strconv.Itoa(partition))
}

// readReplicaFile reads dir's replica.json; found is false when it has none.
func readReplicaFile(dir string) (f replicaFile, found bool, err error) {
	b, err := os.ReadFile(filepath.Join(dir, replicaFileName))
	if errors.Is(err, os.ErrNotExist) {
		return replicaFile{}, false, nil
	}
	if err != nil {
		return replicaFile{}, false, err
	}
	return f, true, json.Unmarshal(b, &f)
}
