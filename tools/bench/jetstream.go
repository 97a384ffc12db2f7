package main

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	labench "github.com/logagent/logagent/internal/bench"
	"github.com/logagent/logagent/internal/freeport"
)

// natsCluster is one nats-server, or three clustered ones, with JetStream
// on file storage in temporary directories.
type natsCluster struct {
	servers []*process
	urls    []string
	conn    *nats.Conn
}

// natsServerConfig is one server's configuration file. With routes, the
// servers form a JetStream cluster named "bench"; syncAlways makes every
// write fsync before it is acknowledged (the default is every 2 min).
func natsServerConfig(name string, port int, storeDir string, clusterPort int, routes []string, syncAlways bool) string {
	var b strings.Builder
	fmt.Fprintf(&b, "server_name: %q\nlisten: \"127.0.0.1:%d\"\n", name, port)
	fmt.Fprintf(&b, "jetstream {\n  store_dir: %q\n", storeDir)
	if syncAlways {
		b.WriteString("  sync_interval: always\n")
	}
	b.WriteString("}\n")
	if len(routes) > 0 {
		quoted := make([]string, len(routes))
		for i, r := range routes {
			quoted[i] = fmt.Sprintf("%q", r)
		}
		fmt.Fprintf(&b, "cluster {\n  name: \"bench\"\n  listen: \"127.0.0.1:%d\"\n  routes: [%s]\n}\n", clusterPort, strings.Join(quoted, ", "))
	}
	return b.String()
}

// startNATS starts size servers (1 or 3) under dir and waits until
// JetStream answers.
func startNATS(ctx context.Context, bin, dir string, size int, syncAlways bool) (*natsCluster, error) {
	ports, err := freeport.Take(2 * size)
	if err != nil {
		return nil, err
	}
	var routes []string
	if size > 1 {
		for i := range size {
			routes = append(routes, fmt.Sprintf("nats://127.0.0.1:%d", ports[size+i]))
		}
	}
	c := &natsCluster{}
	for i := range size {
		name := fmt.Sprintf("s%d", i+1)
		store := filepath.Join(dir, name)
		if err := os.MkdirAll(store, 0o755); err != nil {
			return nil, errors.Join(fmt.Errorf("benchrun: nats store: %w", err), c.stop())
		}
		text := natsServerConfig(name, ports[i], store, ports[size+i], routes, syncAlways)
		file := filepath.Join(dir, name+".conf")
		if err := os.WriteFile(file, []byte(text), 0o644); err != nil {
			return nil, errors.Join(fmt.Errorf("benchrun: nats config: %w", err), c.stop())
		}
		p, err := startProcess("nats-server "+name, filepath.Join(dir, name+".log"), nil, bin, "-c", file)
		if err != nil {
			return nil, errors.Join(err, c.stop())
		}
		c.servers = append(c.servers, p)
		c.urls = append(c.urls, fmt.Sprintf("nats://127.0.0.1:%d", ports[i]))
	}
	if err := c.waitReady(ctx, 60*time.Second); err != nil {
		return nil, errors.Join(err, c.stop())
	}
	return c, nil
}

// waitReady connects to the first server and waits until JetStream (with
// a meta leader, when clustered) answers an account info request.
func (c *natsCluster) waitReady(ctx context.Context, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	var lastErr error
	for time.Now().Before(deadline) {
		for _, p := range c.servers {
			select {
			case <-p.done:
				return fmt.Errorf("benchrun: %s exited at start: %v", p.name, p.err)
			default:
			}
		}
		if c.conn == nil {
			c.conn, lastErr = nats.Connect(c.urls[0], nats.MaxReconnects(-1))
		}
		if c.conn != nil {
			js, err := jetstream.New(c.conn)
			if err == nil {
				infoCtx, cancel := context.WithTimeout(ctx, 2*time.Second)
				_, err = js.AccountInfo(infoCtx)
				cancel()
				if err == nil {
					return nil
				}
			}
			lastErr = err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("benchrun: nats start: %w", ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
	return fmt.Errorf("benchrun: jetstream not ready within %v: %w", limit, lastErr)
}

func (c *natsCluster) stop() error {
	if c.conn != nil {
		c.conn.Close()
	}
	var errs []error
	for _, p := range c.servers {
		errs = append(errs, p.stop(30*time.Second))
	}
	return errors.Join(errs...)
}

// jsWorkload names the streams of one row and says how they are written.
type jsWorkload struct {
	// Name prefixes the row's streams: Name_0 .. Name_{Streams-1}, each on
	// subject Name.i.
	Name     string
	Streams  int
	Replicas int
	// RecordBytes is each message's payload size.
	RecordBytes int
	// MaxPending bounds the unacknowledged async publishes.
	MaxPending int
	Duration   time.Duration
	// Rate, when set, publishes message n at start + n/Rate (an open loop,
	// as logagent bench does with -rate); 0 publishes as fast as acks allow.
	Rate  float64
	Clock labench.Clock
}

func (w jsWorkload) subject(i int) string { return fmt.Sprintf("%s.%d", w.Name, i) }
func (w jsWorkload) stream(i int) string  { return fmt.Sprintf("%s_%d", w.Name, i) }

// createStreams creates the workload's streams on file storage.
func createStreams(ctx context.Context, js jetstream.JetStream, w jsWorkload) error {
	for i := range w.Streams {
		_, err := js.CreateStream(ctx, jetstream.StreamConfig{
			Name: w.stream(i), Subjects: []string{w.subject(i)}, Storage: jetstream.FileStorage, Replicas: w.Replicas,
		})
		if err != nil {
			return fmt.Errorf("benchrun: create stream %s: %w", w.stream(i), err)
		}
	}
	return nil
}

func deleteStreams(ctx context.Context, js jetstream.JetStream, w jsWorkload) error {
	var errs []error
	for i := range w.Streams {
		if err := js.DeleteStream(ctx, w.stream(i)); err != nil {
			errs = append(errs, fmt.Errorf("benchrun: delete stream %s: %w", w.stream(i), err))
		}
	}
	return errors.Join(errs...)
}

// jsOutcome is what a JetStream workload measured.
type jsOutcome struct {
	Records, Bytes, Errors int64
	Elapsed                time.Duration
	// Latency is publish-to-ack (from the due time in an open loop).
	Latency labench.Histogram
	// EndToEnd is due-time-to-delivery (e2e only).
	EndToEnd    labench.Histogram
	NotConsumed int64
	FirstError  string
}

func (o *jsOutcome) sample() sample {
	s := sample{
		RecordsPerSec: perSecond(float64(o.Records), o.Elapsed),
		MBPerSec:      perSecond(float64(o.Bytes)/1e6, o.Elapsed),
	}
	hist := &o.Latency
	if o.EndToEnd.Count() > 0 {
		hist = &o.EndToEnd
	}
	if hist.Count() > 0 {
		s.P50, s.P99 = hist.Quantile(0.5), hist.Quantile(0.99)
	}
	var problems []string
	if o.Errors > 0 {
		problems = append(problems, fmt.Sprintf("%d errors (first: %s)", o.Errors, o.FirstError))
	}
	if o.NotConsumed > 0 {
		problems = append(problems, fmt.Sprintf("%d acknowledged records not consumed within the drain", o.NotConsumed))
	}
	s.Note = strings.Join(problems, "; ")
	return s
}

func perSecond(v float64, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return v / d.Seconds()
}

// inflight is one async publish waiting for its ack.
type inflight struct {
	ack jetstream.PubAckFuture
	due time.Time
}

// jsPublish publishes to the workload's streams in turn for w.Duration
// with at most w.MaxPending unacknowledged messages. With a rate, every
// payload carries its due time for the e2e subscriber; a zero stamp marks
// a warm-up message:
//
//	0        8                                RecordBytes
//	+--------+--------------------------------+
//	| due    | zeros                          |
//	+--------+--------------------------------+
//	  uint64 little endian, Unix nanoseconds
func jsPublish(ctx context.Context, nc *nats.Conn, w jsWorkload) (*jsOutcome, error) {
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(w.MaxPending), jetstream.WithPublishAsyncTimeout(30*time.Second))
	if err != nil {
		return nil, fmt.Errorf("benchrun: jetstream: %w", err)
	}
	out := &jsOutcome{}
	pending := make(chan inflight, w.MaxPending)
	var lastAck time.Time
	collected := make(chan struct{})
	go func() {
		defer close(collected)
		for p := range pending {
			select {
			case <-p.ack.Ok():
				lastAck = w.Clock.Now()
				out.Latency.Record(lastAck.Sub(p.due))
				out.Records++
				out.Bytes += int64(len(p.ack.Msg().Data))
			case err := <-p.ack.Err():
				lastAck = w.Clock.Now()
				if out.Errors == 0 {
					out.FirstError = err.Error()
				}
				out.Errors++
			}
		}
	}()
	// Without a rate no one reads the due time back, so every message
	// shares one payload, as a publisher of ready-made records would.
	fixed := make([]byte, w.RecordBytes)
	stall := jetstream.WithStallWait(30 * time.Second)
	start := w.Clock.Now()
	end := start.Add(w.Duration)
	for n := 0; ctx.Err() == nil; n++ {
		due := w.Clock.Now()
		if w.Rate > 0 {
			due = start.Add(time.Duration(float64(n) / w.Rate * float64(time.Second)))
			if !due.Before(end) {
				break
			}
			if err := w.Clock.SleepUntil(ctx, due); err != nil {
				break
			}
		} else if !due.Before(end) {
			break
		}
		payload := fixed
		if w.Rate > 0 && w.RecordBytes >= 8 {
			// The client keeps each payload until its ack, so a stamped
			// one cannot be reused.
			payload = make([]byte, w.RecordBytes)
			binary.LittleEndian.PutUint64(payload, uint64(due.UnixNano()))
		}
		ack, err := js.PublishAsync(w.subject(n%w.Streams), payload, stall)
		if err != nil {
			close(pending)
			<-collected
			return nil, fmt.Errorf("benchrun: publish to %s: %w", w.subject(n%w.Streams), err)
		}
		pending <- inflight{ack: ack, due: due}
	}
	close(pending)
	<-collected
	out.Elapsed = lastAck.Sub(start)
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("benchrun: publish: %w", err)
	}
	return out, nil
}

// jsReplay reads every message in the workload's streams from the first,
// one ordered consumer per stream, for at most limit.
func jsReplay(ctx context.Context, nc *nats.Conn, w jsWorkload, limit time.Duration) (*jsOutcome, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("benchrun: jetstream: %w", err)
	}
	type streamRead struct {
		records, bytes int64
		err            error
	}
	reads := make([]streamRead, w.Streams)
	var wg sync.WaitGroup
	start := w.Clock.Now()
	for i := range w.Streams {
		stream, err := js.Stream(ctx, w.stream(i))
		if err != nil {
			return nil, fmt.Errorf("benchrun: stream %s: %w", w.stream(i), err)
		}
		info, err := stream.Info(ctx)
		if err != nil {
			return nil, fmt.Errorf("benchrun: stream %s info: %w", w.stream(i), err)
		}
		want := int64(info.State.Msgs)
		cons, err := stream.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{DeliverPolicy: jetstream.DeliverAllPolicy})
		if err != nil {
			return nil, fmt.Errorf("benchrun: ordered consumer on %s: %w", w.stream(i), err)
		}
		wg.Go(func() {
			r := &reads[i]
			it, err := cons.Messages(jetstream.PullMaxMessages(replayPrefetch))
			if err != nil {
				r.err = err
				return
			}
			stop := w.Clock.AfterFunc(limit, it.Stop)
			defer stop()
			defer it.Stop()
			for r.records < want {
				msg, err := it.Next()
				if err != nil {
					if !errors.Is(err, jetstream.ErrMsgIteratorClosed) {
						r.err = err
					}
					return
				}
				r.records++
				r.bytes += int64(len(msg.Data()))
			}
		})
	}
	wg.Wait()
	out := &jsOutcome{Elapsed: w.Clock.Now().Sub(start)}
	for _, r := range reads {
		out.Records += r.records
		out.Bytes += r.bytes
		if r.err != nil {
			out.Errors++
			if out.FirstError == "" {
				out.FirstError = r.err.Error()
			}
		}
	}
	return out, nil
}

// jsEndToEnd publishes at w.Rate while one ordered consumer per stream
// times every message from its due time to its delivery. The consumers
// deliver only messages published after they start (the streams may hold
// a warm-up's). Before the timed run, each stream gets one marker message
// (a zero stamp) and the run starts only once every consumer has received
// its own, so consumer start-up is not charged to the first records.
// Consumers get drain to catch up once publishing stops.
// Publisher and consumers use their own connections (pub, sub), as
// logagent's producers and consumers use their own HTTP connections.
func jsEndToEnd(ctx context.Context, pub, sub *nats.Conn, w jsWorkload, drain time.Duration) (*jsOutcome, error) {
	js, err := jetstream.New(sub)
	if err != nil {
		return nil, fmt.Errorf("benchrun: jetstream: %w", err)
	}
	type streamRead struct {
		records atomic.Int64
		latency labench.Histogram
		warm    chan struct{}
		err     error
	}
	reads := make([]streamRead, w.Streams)
	its := make([]jetstream.MessagesContext, 0, w.Streams)
	var wg sync.WaitGroup
	stopAll := func() {
		for _, it := range its {
			it.Stop()
		}
		wg.Wait()
	}
	for i := range w.Streams {
		cons, err := js.OrderedConsumer(ctx, w.stream(i), jetstream.OrderedConsumerConfig{DeliverPolicy: jetstream.DeliverNewPolicy})
		if err != nil {
			stopAll()
			return nil, fmt.Errorf("benchrun: ordered consumer on %s: %w", w.stream(i), err)
		}
		it, err := cons.Messages()
		if err != nil {
			stopAll()
			return nil, fmt.Errorf("benchrun: messages of %s: %w", w.stream(i), err)
		}
		its = append(its, it)
		r := &reads[i]
		r.warm = make(chan struct{})
		wg.Go(func() {
			warmed := false
			for {
				msg, err := it.Next()
				if err != nil {
					if !errors.Is(err, jetstream.ErrMsgIteratorClosed) {
						r.err = err
					}
					return
				}
				now := w.Clock.Now()
				data := msg.Data()
				if len(data) < 8 {
					continue
				}
				stamp := int64(binary.LittleEndian.Uint64(data))
				if stamp == 0 {
					if !warmed {
						warmed = true
						close(r.warm)
					}
					continue
				}
				r.latency.Record(now.Sub(time.Unix(0, stamp)))
				r.records.Add(1)
			}
		})
	}
	warmCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for i := range w.Streams {
		if _, err := js.Publish(warmCtx, w.subject(i), make([]byte, max(w.RecordBytes, 8))); err != nil {
			stopAll()
			return nil, fmt.Errorf("benchrun: warm-up publish to %s: %w", w.subject(i), err)
		}
	}
	for i := range reads {
		select {
		case <-reads[i].warm:
		case <-warmCtx.Done():
			stopAll()
			return nil, fmt.Errorf("benchrun: consumer of %s got no warm-up message: %w", w.stream(i), warmCtx.Err())
		}
	}
	out, err := jsPublish(ctx, pub, w)
	if err != nil {
		stopAll()
		return nil, err
	}
	deadline := w.Clock.Now().Add(drain)
	for w.Clock.Now().Before(deadline) && ctx.Err() == nil {
		var got int64
		for i := range reads {
			got += reads[i].records.Load()
		}
		if got >= out.Records {
			break
		}
		if err := w.Clock.SleepUntil(ctx, w.Clock.Now().Add(10*time.Millisecond)); err != nil {
			break
		}
	}
	stopAll()
	var consumed int64
	for i := range reads {
		out.EndToEnd.Merge(&reads[i].latency)
		consumed += reads[i].records.Load()
		if err := reads[i].err; err != nil {
			out.Errors++
			if out.FirstError == "" {
				out.FirstError = err.Error()
			}
		}
	}
	out.NotConsumed = max(out.Records-consumed, 0)
	return out, nil
}

// replayPrefetch is how many messages an ordered consumer's iterator keeps
// requested ahead during replay: more than nats.go's default of 500, which
// held JetStream's replay back in trial runs here.
const replayPrefetch = 4096
