package testcluster

import (
	"slices"
	"testing"
	"time"
)

// BenchmarkProduceAcksAll measures one small record produced with acks=all
// to the leader of a partition with two caught-up followers, one request at
// a time, through the client API: the time from request to answer is two
// replica fetch round trips (the held fetch that carries the record, and the
// next that reports it) plus the produce itself. It reports the median and
// the 99th percentile of the request latency.
//
//	go test -run '^$' -bench ProduceAcksAll -benchtime 5000x ./internal/testcluster
func BenchmarkProduceAcksAll(b *testing.B) {
	for _, durability := range []string{"replicated", "fsync"} {
		b.Run(durability, func(b *testing.B) {
			c := Start(b, Options{HCL: `storage { durability = "` + durability + `" }`})
			const topic = "latency"
			leader, _ := createReplicatedTopic(b, c, topic)
			batch := buildBatch(b, [][]byte{[]byte("a small record of about forty bytes....")})
			// Warm the connections and the followers' long polls.
			for range 50 {
				if _, err := leader.Produce(topic, 0, ContentTypeBatch, batch, "all", 5*time.Second); err != nil {
					b.Fatal(err)
				}
			}
			latencies := make([]time.Duration, 0, b.N)
			for b.Loop() {
				start := time.Now()
				if _, err := leader.Produce(topic, 0, ContentTypeBatch, batch, "all", 5*time.Second); err != nil {
					b.Fatal(err)
				}
				latencies = append(latencies, time.Since(start))
			}
			slices.Sort(latencies)
			b.ReportMetric(float64(latencies[len(latencies)/2].Microseconds()), "p50-µs")
			b.ReportMetric(float64(latencies[len(latencies)*99/100].Microseconds()), "p99-µs")
		})
	}
}
