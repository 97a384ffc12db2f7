package client

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/logagent/logagent/record"
)

// fakeAgent is an in-memory agent that speaks the client API of docs/design.md §8,
// for the unit tests of this package only: every append is committed at
// once (the high watermark is the log end), and hooks script failures.
type fakeAgent struct {
	t   *testing.T
	srv *httptest.Server

	mu        sync.Mutex
	topics    map[string]*fakeTopic
	produces  []produceCall
	fetches   []url.Values
	describes int
	appended  chan struct{} // closed and replaced at every append

	// onProduce and onFetch, when set, may answer a request instead of
	// the fake's normal behaviour; call counts from 0 per endpoint.
	onProduce func(call int, pc produceCall) *fakeAnswer
	onFetch   func(call int, query url.Values) *fakeAnswer
}

type fakeTopic struct {
	spec       TopicSpec
	partitions []*fakePartition
}

type fakePartition struct {
	batches        [][]byte // as stored: base offset and epoch stamped
	next           int64    // log end offset, and high watermark
	logStartOffset int64
	epoch          int32
}

// produceCall is a produce request as the fake received it.
type produceCall struct {
	topic       string
	partition   int
	acks        string
	timeout     string
	contentType string
	records     []record.Record // decoded and copied
	batch       []byte
}

// fakeAnswer scripts one answer.
type fakeAnswer struct {
	status     int // an error answer with code, unless 0
	code       string
	retriable  bool
	retryAfter string
	// appendFirst appends the produced batch before the error answer, as
	// an agent does for the after-append codes.
	appendFirst bool
	// hangUp closes the connection without an answer, after the request
	// was read (and appended when appendFirst).
	hangUp bool
	// release, when not nil, is waited on before answering.
	release chan struct{}
	// body replaces a fetch answer's body (status 200, real headers);
	// corrupt flips a byte of the real one.
	body    []byte
	corrupt bool
	// noHeaders drops the offset headers of a fetch answer.
	noHeaders bool
}

func newFakeAgent(t *testing.T) *fakeAgent {
	f := &fakeAgent{t: t, topics: map[string]*fakeTopic{}, appended: make(chan struct{})}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/topics", f.createTopic)
	mux.HandleFunc("GET /v1/topics", f.listTopics)
	mux.HandleFunc("GET /v1/topics/{topic}", f.describeTopic)
	mux.HandleFunc("DELETE /v1/topics/{topic}", f.deleteTopic)
	mux.HandleFunc("POST /v1/topics/{topic}/records", f.produce)
	mux.HandleFunc("GET /v1/topics/{topic}/partitions/{partition}/records", f.fetch)
	mux.HandleFunc("GET /v1/health", func(w http.ResponseWriter, r *http.Request) {
		writeFakeJSON(w, http.StatusOK, Health{Status: "ok", NodeID: "n1"})
	})
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t.Logf("fake agent: %s %s", r.Method, r.URL.RequestURI())
		mux.ServeHTTP(w, r)
	}))
	t.Cleanup(f.srv.Close)
	return f
}

// newClient returns a Client of the fake with the given options.
func (f *fakeAgent) newClient(opts ...Option) *Client {
	f.t.Helper()
	c, err := New(f.srv.URL, opts...)
	if err != nil {
		f.t.Fatal(err)
	}
	return c
}

// addTopic creates a topic directly, with one epoch for all partitions.
func (f *fakeAgent) addTopic(name string, partitions int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.topics[name] = newFakeTopic(TopicSpec{Name: name, Partitions: partitions, ReplicationFactor: 3, MinInsyncReplicas: 2})
}

func newFakeTopic(spec TopicSpec) *fakeTopic {
	ft := &fakeTopic{spec: spec}
	for range spec.Partitions {
		ft.partitions = append(ft.partitions, &fakePartition{epoch: 3})
	}
	return ft
}

// appendBatch stores a client batch at the end of a partition, as a leader
// does, and returns its base offset.
func (f *fakeAgent) appendBatch(topic string, partition int, batch []byte) (int64, int32) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fp := f.topics[topic].partitions[partition]
	h, _, err := record.ParseHeader(batch, 0)
	if err != nil {
		f.t.Errorf("fake agent: append: %v", err)
		return 0, 0
	}
	stored := bytes.Clone(batch)
	base := fp.next
	record.SetBaseOffset(stored, base)
	record.SetLeaderEpoch(stored, fp.epoch)
	fp.batches = append(fp.batches, stored)
	fp.next += int64(h.LastOffsetDelta()) + 1
	close(f.appended)
	f.appended = make(chan struct{})
	return base, fp.epoch
}

// produceCalls is a copy of the produce requests so far.
func (f *fakeAgent) produceCalls() []produceCall {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]produceCall(nil), f.produces...)
}

func (f *fakeAgent) fetchQueries() []url.Values {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]url.Values(nil), f.fetches...)
}

// stored decodes every record of a partition.
func (f *fakeAgent) stored(topic string, partition int) []record.Record {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []record.Record
	d := record.NewDecoder(record.Limits{})
	for _, b := range f.topics[topic].partitions[partition].batches {
		out = append(out, decodeBatch(f.t, d, b)...)
	}
	return out
}

func decodeBatch(t *testing.T, d *record.Decoder, batch []byte) []record.Record {
	it, err := d.Records(batch)
	if err != nil {
		t.Fatalf("decode: %v", err)
	}
	var out []record.Record
	for it.Next() {
		r := it.Record()
		r.Key, r.Value = bytes.Clone(r.Key), bytes.Clone(r.Value)
		out = append(out, r)
	}
	if err := it.Err(); err != nil {
		t.Fatalf("decode: %v", err)
	}
	return out
}

func writeFakeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func writeFakeError(w http.ResponseWriter, status int, code, message string, retriable bool, extra map[string]any) {
	e := map[string]any{"code": code, "message": message, "retriable": retriable}
	for k, v := range extra {
		e[k] = v
	}
	if retriable && status == http.StatusServiceUnavailable && w.Header().Get("Retry-After") == "" {
		w.Header().Set("Retry-After", "1")
	}
	writeFakeJSON(w, status, map[string]any{"error": e})
}

// scripted answers a request as a fakeAnswer says; it reports false when
// the fake should go on normally.
func (f *fakeAgent) scripted(w http.ResponseWriter, a *fakeAnswer) bool {
	if a == nil {
		return false
	}
	if a.release != nil {
		<-a.release
	}
	if a.hangUp {
		conn, _, err := http.NewResponseController(w).Hijack()
		if err != nil {
			f.t.Errorf("fake agent: hijack: %v", err)
			return true
		}
		conn.Close()
		return true
	}
	if a.status == 0 {
		return false
	}
	if a.retryAfter != "" {
		w.Header().Set("Retry-After", a.retryAfter)
	}
	writeFakeError(w, a.status, a.code, "scripted "+a.code, a.retriable, nil)
	return true
}

func (f *fakeAgent) createTopic(w http.ResponseWriter, r *http.Request) {
	var spec TopicSpec
	if err := json.NewDecoder(r.Body).Decode(&spec); err != nil {
		writeFakeError(w, http.StatusBadRequest, CodeInvalidRequest, err.Error(), false, nil)
		return
	}
	if ValidateTopicName(spec.Name) != nil {
		writeFakeError(w, http.StatusBadRequest, CodeInvalidTopicName, "bad name", false, nil)
		return
	}
	if spec.Partitions == 0 {
		spec.Partitions = 3
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.topics[spec.Name]; ok {
		writeFakeError(w, http.StatusConflict, CodeTopicExists, "topic "+spec.Name+" exists", false, nil)
		return
	}
	f.topics[spec.Name] = newFakeTopic(spec)
	writeFakeJSON(w, http.StatusCreated, f.describeLocked(spec.Name))
}

func (f *fakeAgent) describeLocked(name string) TopicInfo {
	ft := f.topics[name]
	info := TopicInfo{Name: name, Config: map[string]json.RawMessage{
		"replication_factor":  json.RawMessage(strconv.Itoa(ft.spec.ReplicationFactor)),
		"min_insync_replicas": json.RawMessage(strconv.Itoa(ft.spec.MinInsyncReplicas)),
	}}
	for i, fp := range ft.partitions {
		info.Partitions = append(info.Partitions, PartitionInfo{
			Partition: i, Leader: "n1", Epoch: fp.epoch,
			Replicas: []string{"n1", "n2", "n3"}, ISR: []string{"n1", "n2"},
			HighWatermark: fp.next, LogStartOffset: fp.logStartOffset,
		})
	}
	return info
}

func (f *fakeAgent) listTopics(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	names := []string{}
	for name := range f.topics {
		names = append(names, name)
	}
	writeFakeJSON(w, http.StatusOK, map[string]any{"topics": names})
}

func (f *fakeAgent) describeTopic(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.describes++
	name := r.PathValue("topic")
	if _, ok := f.topics[name]; !ok {
		writeFakeError(w, http.StatusNotFound, CodeUnknownTopic, "no topic "+name, false, nil)
		return
	}
	writeFakeJSON(w, http.StatusOK, f.describeLocked(name))
}

func (f *fakeAgent) deleteTopic(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	name := r.PathValue("topic")
	if _, ok := f.topics[name]; !ok {
		writeFakeError(w, http.StatusNotFound, CodeUnknownTopic, "no topic "+name, false, nil)
		return
	}
	delete(f.topics, name)
	w.WriteHeader(http.StatusNoContent)
}

func (f *fakeAgent) produce(w http.ResponseWriter, r *http.Request) {
	pc := produceCall{
		topic: r.PathValue("topic"), acks: r.URL.Query().Get("acks"),
		timeout: r.URL.Query().Get("timeout"), contentType: r.Header.Get("Content-Type"),
	}
	var err error
	if pc.partition, err = strconv.Atoi(r.URL.Query().Get("partition")); err != nil {
		writeFakeError(w, http.StatusBadRequest, CodeInvalidRequest, "partition: "+err.Error(), false, nil)
		return
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return
	}
	batches, err := record.SplitBatches(body, 0)
	if err == nil && len(batches) != 1 {
		err = fmt.Errorf("%d batches", len(batches))
	}
	if err != nil {
		writeFakeError(w, http.StatusBadRequest, CodeCorruptBatch, err.Error(), false, nil)
		return
	}
	pc.batch = batches[0]
	pc.records = decodeBatch(f.t, record.NewDecoder(record.Limits{}), pc.batch)

	f.mu.Lock()
	call := len(f.produces)
	f.produces = append(f.produces, pc)
	ft := f.topics[pc.topic]
	f.mu.Unlock()
	if ft == nil {
		writeFakeError(w, http.StatusNotFound, CodeUnknownTopic, "no topic "+pc.topic, false, nil)
		return
	}
	if pc.partition < 0 || pc.partition >= len(ft.partitions) {
		writeFakeError(w, http.StatusNotFound, CodeUnknownPartition, "no such partition", false, nil)
		return
	}
	var answer *fakeAnswer
	if f.onProduce != nil {
		answer = f.onProduce(call, pc)
	}
	if answer != nil && answer.appendFirst {
		f.appendBatch(pc.topic, pc.partition, pc.batch)
	}
	if f.scripted(w, answer) {
		return
	}
	base, epoch := f.appendBatch(pc.topic, pc.partition, pc.batch)
	n := int64(len(pc.records))
	writeFakeJSON(w, http.StatusOK, produceAnswer{
		Topic: pc.topic, Partition: pc.partition, BaseOffset: base,
		LastOffset: base + n - 1, Count: int(n), Epoch: epoch,
	})
}

func (f *fakeAgent) fetch(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	f.mu.Lock()
	call := len(f.fetches)
	f.fetches = append(f.fetches, q)
	f.mu.Unlock()
	var answer *fakeAnswer
	if f.onFetch != nil {
		answer = f.onFetch(call, q)
	}
	if answer != nil && answer.body == nil && !answer.corrupt && !answer.noHeaders && f.scripted(w, answer) {
		return
	}
	partition, err := strconv.Atoi(r.PathValue("partition"))
	if err != nil {
		writeFakeError(w, http.StatusBadRequest, CodeInvalidRequest, err.Error(), false, nil)
		return
	}
	maxBytes := 1 << 20
	if s := q.Get("max_bytes"); s != "" {
		if maxBytes, err = strconv.Atoi(s); err != nil {
			writeFakeError(w, http.StatusBadRequest, CodeInvalidRequest, err.Error(), false, nil)
			return
		}
	}
	var wait time.Duration
	if s := q.Get("wait"); s != "" {
		if wait, err = time.ParseDuration(s); err != nil {
			writeFakeError(w, http.StatusBadRequest, CodeInvalidRequest, err.Error(), false, nil)
			return
		}
	}
	deadline := time.Now().Add(wait)
	for {
		f.mu.Lock()
		ft := f.topics[r.PathValue("topic")]
		if ft == nil || partition >= len(ft.partitions) {
			f.mu.Unlock()
			writeFakeError(w, http.StatusNotFound, CodeUnknownPartition, "no such partition", false, nil)
			return
		}
		fp := ft.partitions[partition]
		offset, err := fakeOffset(q.Get("offset"), fp)
		if err != nil {
			f.mu.Unlock()
			writeFakeError(w, http.StatusBadRequest, CodeInvalidOffset, err.Error(), false, nil)
			return
		}
		if offset < fp.logStartOffset || offset > fp.next {
			lso, hw := fp.logStartOffset, fp.next
			f.mu.Unlock()
			writeFakeError(w, http.StatusRequestedRangeNotSatisfiable, CodeOffsetOutOfRange, "out of range", false,
				map[string]any{"log_start_offset": lso, "high_watermark": hw})
			return
		}
		var body []byte
		for _, b := range fp.batches {
			h, _, _ := record.ParseHeader(b, 0)
			if h.NextOffset() <= offset {
				continue
			}
			if len(body) > 0 && len(body)+len(b) > maxBytes {
				break
			}
			body = append(body, b...)
		}
		hw, lso, appended := fp.next, fp.logStartOffset, f.appended
		f.mu.Unlock()
		if len(body) == 0 && time.Now().Before(deadline) {
			select {
			case <-appended:
				continue
			case <-time.After(time.Until(deadline)):
				continue
			case <-r.Context().Done():
				return
			}
		}
		if answer != nil && answer.body != nil {
			body = answer.body
		}
		if answer != nil && answer.corrupt && len(body) > 0 {
			body[len(body)-1] ^= 0x40
		}
		if answer == nil || !answer.noHeaders {
			w.Header().Set(HighWatermarkHeader, strconv.FormatInt(hw, 10))
			w.Header().Set(LogStartOffsetHeader, strconv.FormatInt(lso, 10))
		}
		w.Header().Set("Content-Type", BatchContentType)
		_, _ = w.Write(body)
		return
	}
}

func fakeOffset(s string, fp *fakePartition) (int64, error) {
	switch s {
	case "earliest":
		return fp.logStartOffset, nil
	case "latest":
		return fp.next, nil
	}
	return strconv.ParseInt(s, 10, 64)
}
