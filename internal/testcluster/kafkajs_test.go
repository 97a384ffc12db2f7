package testcluster

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/logagent/logagent/internal/testenv"
)

// kafkajsScript is the node script TestKafkaJS runs; `make kafkajs`
// installs the kafkajs it requires (pinned in package-lock.json) into
// node_modules beside it.
func kafkajsScript(t *testing.T) (node, script string) {
	t.Helper()
	dir, err := filepath.Abs(filepath.Join("testdata", "kafkajs"))
	if err != nil {
		t.Fatal(err)
	}
	node = os.Getenv("LOGAGENT_NODE")
	if node == "" {
		if node, err = exec.LookPath("node"); err != nil {
			testenv.SkipUnlessCI(t, "!!! NO NODE: TestKafkaJS IS SKIPPED; install it as root with `make kafkajs` (apt-get install nodejs npm) or set LOGAGENT_NODE")
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "kafkajs", "package.json")); err != nil {
		testenv.SkipUnlessCI(t, "!!! NO KAFKAJS in %s/node_modules: TestKafkaJS IS SKIPPED; run `make kafkajs` (npm ci there)", dir)
	}
	return node, filepath.Join(dir, "clients.js")
}

// kafkajsEvent is one JSON line of the script's output (clients.js).
type kafkajsEvent struct {
	Event     string `json:"event"`
	Created   bool   `json:"created"`
	Partition int    `json:"partition"`
	Offset    string `json:"offset"`
	Value     string `json:"value"`
}

// TestKafkaJS: kafkajs 2.2.4 (a node client that stops at non-flexible
// versions and picks its versions from ApiVersions alone) through one
// agent's listener: its admin client creates a 3-partition topic, an
// idempotent acks=-1 producer writes 300 records round the partitions, a
// group consumer reads every record exactly once at the offset the
// producer was answered, commits, and OffsetFetch answers the partitions'
// ends; the log (read over HTTP, not through the listener) holds exactly
// what the producer was told.
func TestKafkaJS(t *testing.T) {
	const topic, group, partitions, records = "kafkajs", "kafkajs-group", 3, 300
	node, script := kafkajsScript(t)
	c := Start(t, Options{Kafka: true})
	a := c.Agents[0]
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, script)
	// The partitioner warning is about keyed records: these name their
	// partitions.
	cmd.Env = append(os.Environ(), "KAFKAJS_NO_PARTITIONER_WARNING=1", "BROKER="+a.KafkaAddr, "TOPIC="+topic, "GROUP="+group,
		"PARTITIONS="+strconv.Itoa(partitions), "RECORDS="+strconv.Itoa(records))
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	t.Logf("kafkajs's log:\n%s", stderr.String())
	if err != nil {
		t.Fatalf("node %s: %v\nstdout:\n%s", script, err, stdout.String())
	}

	type at struct {
		p   int
		off int64
	}
	produced := map[at]string{}
	consumed := map[string]int{}
	committed := map[int]int64{}
	var created, done bool
	dec := json.NewDecoder(&stdout)
	for dec.More() {
		var e kafkajsEvent
		if err := dec.Decode(&e); err != nil {
			t.Fatalf("kafkajs output: %v", err)
		}
		off, _ := strconv.ParseInt(e.Offset, 10, 64)
		switch e.Event {
		case "created":
			created = e.Created
		case "produced":
			if v, dup := produced[at{e.Partition, off}]; dup {
				t.Errorf("producer answered %d/%d for %q and %q", e.Partition, off, v, e.Value)
			}
			produced[at{e.Partition, off}] = e.Value
		case "consumed":
			consumed[e.Value]++
			if want := produced[at{e.Partition, off}]; want != e.Value {
				t.Errorf("consumed %q at %d/%d, where the producer was answered %q", e.Value, e.Partition, off, want)
			}
		case "committed":
			committed[e.Partition] = off
		case "done":
			done = true
		}
	}
	if !created || !done || len(produced) != records {
		t.Fatalf("kafkajs: created %v, done %v, %d records produced (want true, true, %d)", created, done, len(produced), records)
	}
	for i := range records {
		if v := fmt.Sprintf("js-%d", i); consumed[v] != 1 {
			t.Errorf("record %q consumed %d times, want once", v, consumed[v])
		}
	}

	// The log, read over HTTP from the leaders: exactly the records the
	// producer was answered, at their offsets.
	perPartition := map[int]int64{}
	for k := range produced {
		perPartition[k.p]++
	}
	for p := range partitions {
		leader, _ := c.WaitLeader(topic, p, 20*time.Second)
		f, err := leader.Fetch(topic, p, 0, 1<<20, 0)
		if err != nil {
			t.Fatal(err)
		}
		log := decodeRecords(t, f.Batches)
		if int64(len(log)) != perPartition[p] || f.HighWatermark != perPartition[p] {
			t.Errorf("partition %d: %d records in the log, high watermark %d; the producer was answered %d", p, len(log), f.HighWatermark, perPartition[p])
		}
		for off, v := range log {
			if want := produced[at{p, off}]; string(v) != want {
				t.Errorf("partition %d offset %d holds %q, the producer was answered %q", p, off, v, want)
			}
		}
		if committed[p] != perPartition[p] {
			t.Errorf("partition %d: committed offset %d, want its end %d", p, committed[p], perPartition[p])
		}
	}
}
