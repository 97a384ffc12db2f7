package client

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/logagent/logagent/record"
	"github.com/logagent/logagent/wire"
)

// fakeAgent is an in-memory agent that speaks the client API of docs/design.md §8,
// for the unit tests of this package only: every append is committed at
// once (the high watermark is the log end), and hooks script failures.
type fakeAgent struct {
	t   testing.TB
	srv *httptest.Server

	mu        sync.Mutex
	topics    map[string]*fakeTopic
	produces  []produceCall
	answers   []string // of each produce call: "ok", "duplicate", an error code or "hang up"
	fetches   []url.Values
	fetchedAt []int // the partition of each fetch
	describes int
	appended  chan struct{} // closed and replaced at every append

	// Idempotent producers: ids allocated (with their current epoch) and
	// the leader's state per producer and partition.
	producerEpochs map[int64]int16
	producerInits  int
	producerStates map[producerKey]*producerState

	// onProduce and onFetch, when set, may answer a request instead of
	// the fake's normal behaviour; call counts from 0 per endpoint.
	onProduce func(call int, pc produceCall) *fakeAnswer
	onFetch   func(call int, query url.Values) *fakeAnswer
	// onDescribe, when set, may answer GET /v1/topics/{topic} (or hold it
	// with release) before the fake's normal answer.
	onDescribe func(call int) *fakeAnswer
	// initAnswer, when set, answers every POST /v1/producers.
	initAnswer *fakeAnswer

	// Consumer groups (fakegroup_test.go).
	groups              map[string]*fakeGroup
	groupWake           chan struct{} // closed and replaced when a heartbeat may have news
	groupLog            []string
	heartbeats          []fakeHeartbeat
	memberSeq           int
	heartbeatIntervalMS int64
	// onGroup, when set, may answer a group request instead; call counts
	// from 0 per op.
	onGroup    func(op string, call int) *fakeAnswer
	groupCalls map[string]int
	// groupRequests is every group request ("METHOD /path"), with its
	// timeout parameter.
	groupRequests []fakeGroupRequest
}

// fakeGroupRequest is a group request as the fake received it.
type fakeGroupRequest struct {
	what, timeout string
}

type fakeTopic struct {
	spec       TopicSpec
	partitions []*fakePartition
}

// producerKey names an idempotent producer's state on one partition.
type producerKey struct {
	topic     string
	partition int
	id        int64
}

// producerState is what a leader remembers of a producer on a partition
// (KIP-98): its epoch, its last sequence and its last 5 batches.
type producerState struct {
	epoch   int16
	lastSeq int32
	recent  []recentBatch
}

type recentBatch struct {
	seq, lastSeq int32
	base, last   int64
	epoch        int32 // the leader's
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
	// idempotent: the request carried the producer headers, as parsed.
	idempotent bool
	producer   ProducerID
	seq        int32
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
	release <-chan struct{}
	// body replaces a fetch answer's body (status 200, real headers);
	// corrupt flips a byte of the real one.
	body    []byte
	corrupt bool
	// noHeaders drops the offset headers of a fetch answer.
	noHeaders bool
}

func newFakeAgent(t testing.TB) *fakeAgent {
	f := &fakeAgent{t: t, topics: map[string]*fakeTopic{}, appended: make(chan struct{}),
		producerEpochs: map[int64]int16{}, producerStates: map[producerKey]*producerState{},
		groups: map[string]*fakeGroup{}, groupWake: make(chan struct{}), heartbeatIntervalMS: 1000, groupCalls: map[string]int{}}
	mux := http.NewServeMux()
	f.registerGroups(mux)
	mux.HandleFunc("POST /v1/producers", f.initProducer)
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
		if r.URL.Path == "/v1/groups" || strings.HasPrefix(r.URL.Path, "/v1/groups/") {
			f.mu.Lock()
			f.groupRequests = append(f.groupRequests, fakeGroupRequest{r.Method + " " + r.URL.Path, r.URL.Query().Get("timeout")})
			f.mu.Unlock()
		}
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
	return f.appendBatchLocked(topic, partition, batch)
}

func (f *fakeAgent) appendBatchLocked(topic string, partition int, batch []byte) (int64, int32) {
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

// fakeProduceAnswer is a produce answer with the duplicate flag.
type fakeProduceAnswer struct {
	produceAnswer
	Duplicate bool `json:"duplicate,omitempty"`
}

// appendProduce appends a produce request's batch as a leader does: a
// batch of an idempotent producer is checked against the producer's state
// first (the rules of KIP-98). It returns the answer, or the error code of
// a refusal.
func (f *fakeAgent) appendProduce(pc produceCall) (fakeProduceAnswer, string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := len(pc.records)
	answer := func(base int64, epoch int32) produceAnswer {
		return produceAnswer{Topic: pc.topic, Partition: pc.partition, BaseOffset: base,
			LastOffset: base + int64(n) - 1, Count: n, Epoch: epoch}
	}
	if !pc.idempotent {
		base, epoch := f.appendBatchLocked(pc.topic, pc.partition, pc.batch)
		return fakeProduceAnswer{produceAnswer: answer(base, epoch)}, ""
	}
	key := producerKey{pc.topic, pc.partition, pc.producer.ID}
	st := f.producerStates[key]
	last := record.AddSequence(pc.seq, n-1)
	switch {
	case st == nil:
		// An unknown producer: any sequence goes.
	case pc.producer.Epoch < st.epoch:
		return fakeProduceAnswer{}, CodeInvalidProducerEpoch
	case pc.producer.Epoch > st.epoch:
		if pc.seq != 0 {
			return fakeProduceAnswer{}, CodeOutOfOrderSequence
		}
	default:
		for _, r := range st.recent {
			if r.seq == pc.seq && r.lastSeq == last {
				return fakeProduceAnswer{produceAnswer: answer(r.base, r.epoch), Duplicate: true}, ""
			}
		}
		if pc.seq != record.AddSequence(st.lastSeq, 1) {
			return fakeProduceAnswer{}, CodeOutOfOrderSequence
		}
	}
	base, epoch := f.appendBatchLocked(pc.topic, pc.partition, pc.batch)
	if st == nil || pc.producer.Epoch > st.epoch {
		st = &producerState{epoch: pc.producer.Epoch}
		f.producerStates[key] = st
	}
	st.lastSeq = last
	st.recent = append(st.recent, recentBatch{seq: pc.seq, lastSeq: last, base: base, last: base + int64(n) - 1, epoch: epoch})
	if len(st.recent) > 5 {
		st.recent = st.recent[1:]
	}
	return fakeProduceAnswer{produceAnswer: answer(base, epoch)}, ""
}

// forgetProducers drops the state of every producer of a partition, as a
// leader does on its retention tick for a producer whose last batch
// retention deleted (producer.State.RemoveBefore) or that wrote nothing
// for producer.id_expiration (State.Expire). Like State.Check for a
// producer it does not know, appendProduce then appends the producer's
// next batch at any sequence.
func (f *fakeAgent) forgetProducers(topic string, partition int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for k := range f.producerStates {
		if k.topic == topic && k.partition == partition {
			delete(f.producerStates, k)
		}
	}
}

// initProducer is POST /v1/producers.
func (f *fakeAgent) initProducer(w http.ResponseWriter, r *http.Request) {
	var in struct {
		ID *int64 `json:"producer_id"`
	}
	if f.scripted(w, f.initAnswer) {
		return
	}
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&in); err != nil && err != io.EOF {
		writeFakeError(w, http.StatusBadRequest, CodeInvalidRequest, err.Error(), false, nil)
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.producerInits++
	if in.ID == nil {
		id := int64(1000 + len(f.producerEpochs))
		f.producerEpochs[id] = 0
		writeFakeJSON(w, http.StatusCreated, ProducerID{ID: id})
		return
	}
	epoch, ok := f.producerEpochs[*in.ID]
	if !ok {
		writeFakeError(w, http.StatusNotFound, CodeUnknownProducerID, "no such producer", false, nil)
		return
	}
	f.producerEpochs[*in.ID] = epoch + 1
	writeFakeJSON(w, http.StatusCreated, ProducerID{ID: *in.ID, Epoch: epoch + 1})
}

// parseProducer reads the producer headers of a produce request: all three
// or none, and the batch header agreeing.
func parseProducer(r *http.Request, pc *produceCall) error {
	id, epoch, seq := r.Header.Get(wire.HeaderProducerID), r.Header.Get(wire.HeaderProducerEpoch), r.Header.Get(wire.HeaderSequence)
	h, _, err := record.ParseHeader(pc.batch, 0)
	if err != nil {
		return err
	}
	if id == "" && epoch == "" && seq == "" {
		if h.ProducerID() != -1 || h.BaseSequence() != -1 {
			return fmt.Errorf("a producer in the batch header only")
		}
		return nil
	}
	if id == "" || epoch == "" || seq == "" {
		return fmt.Errorf("producer headers: all three or none")
	}
	i, err1 := strconv.ParseInt(id, 10, 64)
	e, err2 := strconv.ParseInt(epoch, 10, 16)
	s, err3 := strconv.ParseInt(seq, 10, 32)
	if err := errors.Join(err1, err2, err3); err != nil || i < 0 || e < 0 || s < 0 {
		return fmt.Errorf("producer headers %q %q %q: %v", id, epoch, seq, err)
	}
	if r.URL.Query().Get("acks") != "all" || !r.URL.Query().Has("partition") {
		return fmt.Errorf("an idempotent produce needs acks=all and a partition")
	}
	if h.ProducerID() != i || int64(h.ProducerEpoch()) != e || int64(h.BaseSequence()) != s {
		return fmt.Errorf("producer headers %d/%d/%d, batch header %d/%d/%d", i, e, s, h.ProducerID(), h.ProducerEpoch(), h.BaseSequence())
	}
	pc.idempotent, pc.producer, pc.seq = true, ProducerID{ID: i, Epoch: int16(e)}, int32(s)
	return nil
}

// appendedCalls is a copy of the produce requests that appended their
// batch and were answered so: an idempotent producer's batches, once each,
// without the attempts refused as out of order because they overtook an
// older batch.
func (f *fakeAgent) appendedCalls() []produceCall {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []produceCall
	for i, a := range f.answers {
		if a == "ok" {
			out = append(out, f.produces[i])
		}
	}
	return out
}

// produceAnswers is a copy of what each produce request was answered.
func (f *fakeAgent) produceAnswers() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.answers...)
}

func (f *fakeAgent) noteAnswer(call int, what string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for len(f.answers) <= call {
		f.answers = append(f.answers, "")
	}
	f.answers[call] = what
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

// fetchesOf is the queries of the fetches of one partition so far.
func (f *fakeAgent) fetchesOf(partition int) []url.Values {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []url.Values
	for i, q := range f.fetches {
		if f.fetchedAt[i] == partition {
			out = append(out, q)
		}
	}
	return out
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

func decodeBatch(t testing.TB, d *record.Decoder, batch []byte) []record.Record {
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
	call := f.describes
	f.describes++
	hook := f.onDescribe
	f.mu.Unlock()
	if hook != nil && f.scripted(w, hook(call)) {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
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
	if err := parseProducer(r, &pc); err != nil {
		writeFakeError(w, http.StatusBadRequest, CodeInvalidRequest, err.Error(), false, nil)
		return
	}

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
		f.appendProduce(pc)
	}
	if f.scripted(w, answer) {
		what := answer.code
		if answer.hangUp {
			what = "hang up"
		}
		f.noteAnswer(call, what)
		return
	}
	a, code := f.appendProduce(pc)
	if code != "" {
		f.noteAnswer(call, code)
		writeFakeError(w, http.StatusConflict, code, "fake leader: "+code, false, nil)
		return
	}
	f.noteAnswer(call, map[bool]string{false: "ok", true: "duplicate"}[a.Duplicate])
	writeFakeJSON(w, http.StatusOK, a)
}

func (f *fakeAgent) fetch(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	f.mu.Lock()
	call := len(f.fetches)
	f.fetches = append(f.fetches, q)
	p, _ := strconv.Atoi(r.PathValue("partition"))
	f.fetchedAt = append(f.fetchedAt, p)
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
		offsetParam := q.Get("offset")
		if q.Has("group") {
			var status int
			var code string
			if offsetParam, status, code = f.memberFetchLocked(q, r.PathValue("topic"), partition, fp); code != "" {
				f.mu.Unlock()
				writeFakeError(w, status, code, "fake coordinator: "+code, false, nil)
				return
			}
		}
		offset, err := fakeOffset(offsetParam, fp)
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
