package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// The kafka group (issue 17): franz-go's kgo, driven in-process as the
// JetStream rows drive nats.go, through the first agent's Kafka listener,
// against produce-r3's and consume's HTTP rows on the same cluster of the
// same run (both run whenever this group does).

// kafkaBufferedRecords is the kgo producer's MaxBufferedRecords: how many
// records it holds unacknowledged before Produce blocks, which is what
// keeps the closed loop's load in flight. kgo's default of 50,000 queues a
// second and more of 1 KiB records behind the one request the listener
// serves per connection at a time (docs/kafka.md, "Framing and limits"):
// the same records/s, at latencies that only measure the queue. 10,000
// keeps a full request (three partitions' batches) waiting behind the one
// being served, for both record sizes.
const kafkaBufferedRecords = 10000

// kafkaProduceGoal and kafkaReplayGoal are issue 17's goals: at least the
// HTTP produce's records/s, and within 10 % of the HTTP replay.
const (
	kafkaProduceGoal = 1
	kafkaReplayGoal  = 0.9
)

func kafkaTopic(size int) string { return fmt.Sprintf("kafka_%d", size) }

// kafkaSeed is the first dev agent's Kafka listener: the sidecar the load
// generator's "host" runs, as the HTTP rows use the first client API.
func (o *options) kafkaSeed() string { return fmt.Sprintf("127.0.0.1:%d", 9092+o.portOffset) }

func (o *options) kafkaSetup(c *logagentCluster, what string) string {
	return fmt.Sprintf("%s; franz-go kgo %s through the Kafka listener %s", c.setup, what, o.kafkaSeed())
}

// logagentKafka runs the kafka group's produce rows, each on a topic of
// its own created through the listener, then replays produce-r3's 1 KiB
// topic, which consume has just read over HTTP.
func (o *options) logagentKafka(ctx context.Context, res *results, c *logagentCluster) {
	adm, err := kgo.NewClient(kgo.SeedBrokers(o.kafkaSeed()))
	if err != nil {
		o.note(res, "kafka: admin client: %v", err)
		return
	}
	defer adm.Close()
	admin := kadm.NewClient(adm)
	for _, size := range []int{100, 1024} {
		topic := kafkaTopic(size)
		o.progress("kgo through the Kafka listener: RF 3 acks=all idempotent, %s", sizeName(size))
		created, err := admin.CreateTopic(ctx, partitions, 3, map[string]*string{"min.insync.replicas": kadm.StringPtr("2")}, topic)
		if err == nil {
			err = created.Err
		}
		if err != nil {
			o.note(res, "kafka: create topic %s: %v", topic, err)
			continue
		}
		o.settle()
		var acked int64
		if o.warmup > 0 {
			warm, err := kgoProduce(ctx, o.kafkaSeed(), topic, size, o.warmup)
			if err != nil {
				o.note(res, "kafka warm-up: %v", err)
			} else {
				acked += warm.Records
			}
		}
		out, err := kgoProduce(ctx, o.kafkaSeed(), topic, size, o.duration)
		if err != nil {
			o.note(res, "kafka produce %s: %v", sizeName(size), err)
			continue
		}
		acked += out.Records
		s := out.sample()
		// A row counts acknowledged records; the log must hold them.
		if held, err := recordsHeld(ctx, admin, topic); err != nil {
			s.Note = strings.TrimSpace(s.Note + " " + err.Error())
		} else if held < acked {
			s.Note = strings.TrimSpace(s.Note + fmt.Sprintf(" %s holds %d records, %d were acknowledged", topic, held, acked))
		}
		s.Command = fmt.Sprintf("bin/benchrun -only kafka -duration %v", o.duration)
		s.Setup = o.kafkaSetup(c, fmt.Sprintf("producer: idempotent, acks=all, default linger and batching, %d B values without keys, MaxBufferedRecords %d, topic of %d partitions RF 3 min.insync.replicas 2 created with kadm",
			size, kafkaBufferedRecords, partitions))
		res.logagent[topic] = s
		o.progress("  %.0f records/s, %.1f MB/s, p50 %v, p99 %v", s.RecordsPerSec, s.MBPerSec, s.P50, s.P99)
	}

	// The replay twice, by one kgo client and by one client per
	// partition, in fetches of kafkaReplayFetchBytes per partition, against
	// logagent's client reading in fetches of that size too.
	replayed := produceRowFor("produce-r3", 1024).topic()
	o.progress("logagent consume %s, %d-byte fetches", replayed, kafkaReplayFetchBytes)
	o.settle()
	res.logagent["kafka_http_consume"] = o.logagentSample(ctx, res, c, o.consumeArgsWith(c, kafkaReplayFetchBytes))
	for _, clients := range []int{1, partitions} {
		o.progress("kgo through the Kafka listener: replay of %s by %d client(s)", replayed, clients)
		o.settle()
		out, err := kgoReplay(ctx, o.kafkaSeed(), admin, replayed, kafkaReplayFetchBytes, clients, o.duration)
		if err != nil {
			o.note(res, "kafka replay: %v", err)
			continue
		}
		s := out.sample()
		s.P50, s.P99 = 0, 0
		s.Command = fmt.Sprintf("bin/benchrun -only kafka -duration %v", o.duration)
		s.Setup = o.kafkaSetup(c, fmt.Sprintf("%d consumer(s) in benchrun, the partitions of %s dealt round-robin: ConsumePartitions from each partition's start, FetchMaxPartitionBytes %d, each partition set back to its start (SetOffsets) once read to the end it had, until the duration passes",
			clients, replayed, kafkaReplayFetchBytes))
		res.logagent[kafkaReplayKey(clients)] = s
		o.progress("  %.0f records/s, %.1f MB/s", s.RecordsPerSec, s.MBPerSec)
	}
}

// kafkaReplayFetchBytes is the kafka group's replay fetch size per
// partition, for both clients: kgo keeps one fetch in flight per broker
// and decodes an answer before it asks again, so it waits out fewer round
// trips with larger fetches than consume's 4 MiB (measured here with one
// client per partition: 1,045 MB/s with 4 MiB, 1,399 with 16 MiB; the
// HTTP replay 1,407 and 1,503).
const kafkaReplayFetchBytes = 16 << 20

func kafkaReplayKey(clients int) string { return fmt.Sprintf("kafka_consume_%d", clients) }

// recordsHeld is the number of records in topic's partitions, from their
// start and end offsets.
func recordsHeld(ctx context.Context, admin *kadm.Client, topic string) (int64, error) {
	starts, err := admin.ListStartOffsets(ctx, topic)
	if err == nil {
		err = starts.Error()
	}
	if err != nil {
		return 0, fmt.Errorf("benchrun: start offsets of %s: %w", topic, err)
	}
	ends, err := admin.ListEndOffsets(ctx, topic)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return 0, fmt.Errorf("benchrun: end offsets of %s: %w", topic, err)
	}
	var held int64
	ends.Each(func(end kadm.ListedOffset) {
		if start, ok := starts.Lookup(topic, end.Partition); ok {
			held += end.Offset - start.Offset
		}
	})
	return held, nil
}

// kgoProduce produces size-byte values without keys to topic for
// duration, in a closed loop that Produce's blocking on a full buffer
// paces, then waits for every record's answer. Latency runs from Produce
// to the record's promise; records/s counts acknowledged records over the
// time until the last answer, as jsPublish does.
func kgoProduce(ctx context.Context, seed, topic string, size int, duration time.Duration) (*jsOutcome, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(seed), kgo.DefaultProduceTopic(topic),
		kgo.RequiredAcks(kgo.AllISRAcks()), kgo.MaxBufferedRecords(kafkaBufferedRecords))
	if err != nil {
		return nil, fmt.Errorf("benchrun: kgo producer: %w", err)
	}
	defer cl.Close()
	out := &jsOutcome{}
	var mu sync.Mutex
	var lastAck time.Time
	// Produce stamps each record with the time of the call, which the
	// promise turns into its latency; one promise serves every record.
	promise := func(r *kgo.Record, err error) {
		now := time.Now()
		mu.Lock()
		defer mu.Unlock()
		lastAck = now
		if err != nil {
			if out.Errors == 0 {
				out.FirstError = err.Error()
			}
			out.Errors++
			return
		}
		out.Latency.Record(now.Sub(r.Timestamp))
		out.Records++
		out.Bytes += int64(len(r.Value))
	}
	// Every record shares one value, as jsPublish's do.
	value := make([]byte, size)
	start := time.Now()
	end := start.Add(duration)
	for ctx.Err() == nil && time.Now().Before(end) {
		cl.Produce(ctx, &kgo.Record{Value: value}, promise)
	}
	flushErr := cl.Flush(ctx)
	mu.Lock()
	defer mu.Unlock()
	out.Elapsed = lastAck.Sub(start)
	if err := errors.Join(ctx.Err(), flushErr); err != nil {
		return nil, fmt.Errorf("benchrun: kgo produce: %w", err)
	}
	return out, nil
}

// kgoReplay reads topic from each partition's start to the end it has
// now, over and over until duration passes, as `logagent bench consume
// -repeat` does over HTTP: a partition read to its end is set back to
// its start. Records past a partition's end (none: nothing writes to the
// topic meanwhile) would not count. The partitions are dealt round-robin
// to clients kgo clients, each polling in a goroutine of its own.
func kgoReplay(ctx context.Context, seed string, admin *kadm.Client, topic string, fetchBytes int32, clients int, duration time.Duration) (*jsOutcome, error) {
	starts, err := admin.ListStartOffsets(ctx, topic)
	if err == nil {
		err = starts.Error()
	}
	if err != nil {
		return nil, fmt.Errorf("benchrun: start offsets of %s: %w", topic, err)
	}
	ends, err := admin.ListEndOffsets(ctx, topic)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return nil, fmt.Errorf("benchrun: end offsets of %s: %w", topic, err)
	}
	var parts []replayPartition
	starts.Each(func(o kadm.ListedOffset) {
		if end, ok := ends.Lookup(topic, o.Partition); ok && end.Offset > o.Offset {
			parts = append(parts, replayPartition{partition: o.Partition, start: o.Offset, last: end.Offset - 1})
		}
	})
	if len(parts) == 0 {
		return nil, fmt.Errorf("benchrun: %s holds no records to replay", topic)
	}
	slices.SortFunc(parts, func(a, b replayPartition) int { return int(a.partition - b.partition) })
	clients = min(clients, len(parts))
	dealt := make([][]replayPartition, clients)
	for i, p := range parts {
		dealt[i%clients] = append(dealt[i%clients], p)
	}

	pollCtx, cancel := context.WithTimeout(ctx, duration)
	defer cancel()
	outs := make([]jsOutcome, clients)
	errs := make([]error, clients)
	var wg sync.WaitGroup
	start := time.Now()
	for i := range dealt {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = kgoReplayPartitions(pollCtx, seed, topic, fetchBytes, dealt[i], &outs[i])
		}()
	}
	wg.Wait()
	out := &jsOutcome{Elapsed: time.Since(start)}
	for i := range outs {
		out.Records += outs[i].Records
		out.Bytes += outs[i].Bytes
		if out.Errors == 0 {
			out.FirstError = outs[i].FirstError
		}
		out.Errors += outs[i].Errors
	}
	if err := errors.Join(append(errs, ctx.Err())...); err != nil {
		return nil, fmt.Errorf("benchrun: kgo replay: %w", err)
	}
	return out, nil
}

// replayPartition is one partition of a replay: read from start to last,
// then from start again.
type replayPartition struct {
	partition   int32
	start, last int64
}

// kgoReplayPartitions is one kgo client of kgoReplay, reading parts until
// ctx ends.
func kgoReplayPartitions(ctx context.Context, seed, topic string, fetchBytes int32, parts []replayPartition, out *jsOutcome) error {
	from := map[int32]kgo.Offset{}
	byPartition := map[int32]replayPartition{}
	for _, p := range parts {
		from[p.partition] = kgo.NewOffset().At(p.start)
		byPartition[p.partition] = p
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(seed), kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: from}),
		kgo.FetchMaxPartitionBytes(fetchBytes))
	if err != nil {
		return fmt.Errorf("benchrun: kgo consumer: %w", err)
	}
	defer cl.Close()
	for ctx.Err() == nil {
		fetches := cl.PollFetches(ctx)
		if fetches.IsClientClosed() {
			break
		}
		rewind := map[int32]kgo.EpochOffset{}
		fetches.EachPartition(func(p kgo.FetchTopicPartition) {
			if p.Err != nil {
				if !errors.Is(p.Err, context.DeadlineExceeded) && !errors.Is(p.Err, context.Canceled) {
					if out.Errors == 0 {
						out.FirstError = p.Err.Error()
					}
					out.Errors++
				}
				return
			}
			rp := byPartition[p.Partition]
			for _, r := range p.Records {
				if r.Offset > rp.last {
					break
				}
				out.Records++
				out.Bytes += int64(len(r.Key) + len(r.Value))
				for _, h := range r.Headers {
					out.Bytes += int64(len(h.Key) + len(h.Value))
				}
				if r.Offset == rp.last {
					rewind[p.Partition] = kgo.EpochOffset{Epoch: -1, Offset: rp.start}
				}
			}
		})
		if len(rewind) > 0 {
			cl.SetOffsets(map[string]map[int32]kgo.EpochOffset{topic: rewind})
		}
	}
	return nil
}

// kafkaRows set the kafka group's figures against the HTTP rows of the
// same cluster.
func kafkaRows(res *results) []comparison {
	var rows []comparison
	for _, r := range produceRows {
		if r.group != "produce-r3" {
			continue
		}
		rows = append(rows, comparison{Group: "kafka", Name: fmt.Sprintf("kgo produce, RF 3 acks=all idempotent, %s", sizeName(r.size)),
			TheirsName: "logagent's client over HTTP (produce-r3)", Ours: res.logagent[kafkaTopic(r.size)], Theirs: res.logagent[r.topic()],
			Metric: byRecords, Goal: kafkaProduceGoal})
	}
	return append(rows,
		comparison{Group: "kafka", Name: "kgo replay 1 KiB, RF 3", TheirsName: "logagent's client over HTTP (16 MiB fetches)",
			Ours: res.logagent[kafkaReplayKey(1)], Theirs: res.logagent["kafka_http_consume"], Metric: byMB, Goal: kafkaReplayGoal},
		// One kgo client per partition, as a group of that many members
		// would read: kgo decodes one broker's answers in one goroutine,
		// and the listener is one broker (docs/kafka.md).
		comparison{Group: "kafka", Name: "kgo replay 1 KiB, RF 3, one client per partition", TheirsName: "logagent's client over HTTP (16 MiB fetches)",
			Ours: res.logagent[kafkaReplayKey(partitions)], Theirs: res.logagent["kafka_http_consume"], Metric: byMB})
}
