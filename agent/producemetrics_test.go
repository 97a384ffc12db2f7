package agent

import (
	"context"
	"testing"

	"github.com/valyala/fasthttp"

	"github.com/logagent/logagent/kafka"
	"github.com/logagent/logagent/wire"
)

const produceDurationFamily = "logagent_produce_request_duration_seconds"

// produceCounts are the sample counts of the produce duration's series,
// by their labels ("acks=all,outcome=success"), and their total.
func produceCounts(t *testing.T, a *Agent) (map[string]uint64, uint64) {
	t.Helper()
	// A unit test's agent has no group coordinator for the collector of
	// the per-partition and group figures, which fails: the instruments'
	// families are gathered all the same.
	families, _ := a.metrics.Registry().Gather()
	counts, total := map[string]uint64{}, uint64(0)
	for _, mf := range families {
		if mf.GetName() != produceDurationFamily {
			continue
		}
		for _, m := range mf.GetMetric() {
			key := ""
			for _, l := range m.GetLabel() {
				if key != "" {
					key += ","
				}
				key += l.GetName() + "=" + l.GetValue()
			}
			counts[key] = m.GetHistogram().GetSampleCount()
			total += m.GetHistogram().GetSampleCount()
		}
	}
	return counts, total
}

// TestProduceDurationCountsEveryAnswer: every produce answer is observed
// in logagent_produce_request_duration_seconds, by acks and outcome. The
// HTTP produce observed only the requests that got past the serving, topic
// and acks checks, and the Kafka listener's only those past its acks
// check: an agent that refused every produce (starting, stopping, an
// unknown topic, a bad acks) showed none, and no series said which
// answers were errors.
func TestProduceDurationCountsEveryAnswer(t *testing.T) {
	a := unitAgent(t)
	a.coord = noTopicsCoordinator{}
	rt := &router{}
	rt.add(fasthttp.MethodPost, "/v1/topics/{topic}/records", a.handleProduce)
	broker := a.newKafkaBroker()
	httpProduce := func(path string) func() int {
		return func() int {
			var ctx fasthttp.RequestCtx
			ctx.Request.Header.SetMethod(fasthttp.MethodPost)
			ctx.Request.Header.SetContentType(wire.ContentTypeNDJSON)
			ctx.Request.SetRequestURI(path)
			ctx.Request.SetBodyString("x\n")
			rt.handle(&ctx)
			return ctx.Response.StatusCode()
		}
	}
	kafkaProduce := func(topic string, acks int16) func() int {
		return func() int {
			_, err := broker.Produce(context.Background(), kafka.ProduceRequest{Topic: topic, Acks: acks, Batch: testBatch(t, []string{"x"}), Records: 1})
			if err == nil {
				return 200
			}
			return -1
		}
	}
	for _, tc := range []struct {
		name    string
		serving bool
		do      func() int
		want    string // the series that counts it
	}{
		{"http, agent starting", false, httpProduce("/v1/topics/orders/records"), "acks=all,outcome=server_error"},
		{"http, no possible topic name", true, httpProduce("/v1/topics/..%2Fx/records?acks=1"), "acks=1,outcome=client_error"},
		{"http, internal topic", true, httpProduce("/v1/topics/__consumer_offsets/records?acks=0"), "acks=0,outcome=client_error"},
		{"http, unknown topic", true, httpProduce("/v1/topics/orders/records?acks=-1"), "acks=all,outcome=client_error"},
		{"http, bad acks", true, httpProduce("/v1/topics/orders/records?acks=2"), "acks=invalid,outcome=client_error"},
		{"kafka, agent starting", false, kafkaProduce("orders", -1), "acks=all,outcome=server_error"},
		{"kafka, internal topic", true, kafkaProduce("__consumer_offsets", 1), "acks=1,outcome=client_error"},
		{"kafka, unknown topic", true, kafkaProduce("orders", 0), "acks=0,outcome=client_error"},
		{"kafka, bad acks", true, kafkaProduce("orders", 3), "acks=invalid,outcome=client_error"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.serving {
				a.state.Store(stateServing)
			} else {
				a.state.Store(stateStarting)
			}
			before, beforeTotal := produceCounts(t, a)
			status := tc.do()
			after, afterTotal := produceCounts(t, a)
			if after[tc.want] != before[tc.want]+1 || afterTotal != beforeTotal+1 {
				t.Errorf("answered %d: counted %d times in %s{%s}, %d in all; want once there; series %v",
					status, after[tc.want]-before[tc.want], produceDurationFamily, tc.want, afterTotal-beforeTotal, after)
			}
		})
	}
}

// TestProduceDurationByOutcome: a produce's duration is labelled by its
// outcome, so error rates can be read off the histogram's counts.
func TestProduceDurationByOutcome(t *testing.T) {
	c := startTestCluster(t, 1, "")
	n1 := c.agents[0]
	c.createTopic(n1, "metered", 1, 1, 1)
	c.waitLeader("metered", 0, 1)
	for _, tc := range []struct {
		query, contentType, body string
		status                   int
		want                     string
	}{
		{"acks=all", wire.ContentTypeNDJSON, "a\n", 200, "acks=all,outcome=success"},
		{"acks=0", wire.ContentTypeNDJSON, "a\n", 200, "acks=0,outcome=success"},
		{"acks=1", wire.ContentTypeJSON, `{"records":[{"value":1}]}`, 400, "acks=1,outcome=client_error"},
		{"acks=all&timeout=1h", wire.ContentTypeNDJSON, "a\n", 400, "acks=all,outcome=client_error"},
		{"acks=all", "text/csv", "a\n", 415, "acks=all,outcome=client_error"},
	} {
		before, beforeTotal := produceCounts(t, n1.agent)
		status, body := n1.call("POST", "/v1/topics/metered/records?partition=0&"+tc.query, tc.contentType, []byte(tc.body))
		if status != tc.status {
			t.Fatalf("%s %s: %d %s, want %d", tc.query, tc.contentType, status, body, tc.status)
		}
		after, afterTotal := produceCounts(t, n1.agent)
		if after[tc.want] != before[tc.want]+1 || afterTotal != beforeTotal+1 {
			t.Errorf("%s %s (%d): %s{%s} counted %d more, %d in all; want once there", tc.query, tc.contentType, status,
				produceDurationFamily, tc.want, after[tc.want]-before[tc.want], afterTotal-beforeTotal)
		}
	}
	// Ten series, all there from the start: an error rate has a
	// denominator and a numerator before the first error.
	if counts, _ := produceCounts(t, n1.agent); len(counts) != 10 {
		t.Errorf("%d series %v, want 10", len(counts), counts)
	}
}
