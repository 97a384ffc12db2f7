package main

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/logagent/logagent/client"
	"github.com/logagent/logagent/record"
	"github.com/logagent/logagent/wire"
)

// fakeClientAPI is a small in-memory agent speaking the client API of
// docs/design.md §8, for the unit tests of the data commands only: every append is
// committed at once, and fetches wait a moment instead of long-polling.
type fakeClientAPI struct {
	t   *testing.T
	srv *httptest.Server

	mu sync.Mutex
	// live is the agents Consul reports alive (GET /v1/status), passing
	// unless NotPassing, taking new replicas unless that or Draining; n1
	// unless a test sets others.
	live []client.AgentInfo
	// leaderless is how many describes to come show no leaders, as
	// just after a creation.
	leaderless int
	// unavailable is how many fetches to come answer 503
	// leader_not_available, as during an election.
	unavailable int
	topics      map[string]*client.TopicInfo
	batches     map[string][][][]byte // topic -> partition -> stored batches
	produced    []string              // raw query of every produce request
	// producer is the idempotent producer headers of every appended
	// batch, "id/epoch/sequence", or "" without them.
	producer  []string
	producers int64 // ids allocated
	// nextSeq is the sequence the leader expects next of a producer id on
	// a partition ("id/partition"); of the leader's rules only the one
	// that keeps a producer's batches in order.
	nextSeq map[string]int64

	// Consumer groups (fakegroup_test.go).
	groups    map[string]*fakeCLIGroup
	memberSeq int
	commits   int // commits accepted
	leaves    int
}

func newFakeClientAPI(t *testing.T) *fakeClientAPI {
	f := &fakeClientAPI{t: t, live: []client.AgentInfo{{NodeID: "n1", ClientAddress: "127.0.0.1:7070", PeerAddress: "127.0.0.1:7171"}},
		topics: map[string]*client.TopicInfo{}, batches: map[string][][][]byte{}, nextSeq: map[string]int64{},
		groups: map[string]*fakeCLIGroup{}}
	mux := http.NewServeMux()
	f.registerGroups(mux)
	mux.HandleFunc("GET /v1/health", func(w http.ResponseWriter, r *http.Request) {
		fakeJSON(w, http.StatusOK, client.Health{Status: "ok", NodeID: "n1"})
	})
	mux.HandleFunc("GET /v1/status", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		fakeJSON(w, http.StatusOK, client.AgentStatus{NodeID: "n1", State: "serving", Agents: f.live})
	})
	mux.HandleFunc("POST /v1/producers", f.initProducer)
	mux.HandleFunc("POST /v1/topics", f.create)
	mux.HandleFunc("GET /v1/topics", f.list)
	mux.HandleFunc("GET /v1/topics/{topic}", f.describe)
	mux.HandleFunc("DELETE /v1/topics/{topic}", f.delete)
	mux.HandleFunc("POST /v1/topics/{topic}/records", f.produce)
	mux.HandleFunc("GET /v1/topics/{topic}/partitions/{partition}/records", f.fetch)
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t.Logf("fake agent: %s %s", r.Method, r.URL.RequestURI())
		mux.ServeHTTP(w, r)
	}))
	t.Cleanup(f.srv.Close)
	return f
}

func fakeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func fakeError(w http.ResponseWriter, status int, code string, extra map[string]any) {
	e := map[string]any{"code": code, "message": "fake: " + code, "retriable": false}
	for k, v := range extra {
		e[k] = v
	}
	fakeJSON(w, status, map[string]any{"error": e})
}

// addTopic adds a topic with the given partitions as described.
func (f *fakeClientAPI) addTopic(info client.TopicInfo) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.topics[info.Name] = &info
	f.batches[info.Name] = make([][][]byte, len(info.Partitions))
}

func (f *fakeClientAPI) create(w http.ResponseWriter, r *http.Request) {
	var spec client.TopicSpec
	if err := json.NewDecoder(r.Body).Decode(&spec); err != nil {
		fakeError(w, http.StatusBadRequest, client.CodeInvalidRequest, nil)
		return
	}
	f.mu.Lock()
	_, exists := f.topics[spec.Name]
	f.mu.Unlock()
	if exists {
		fakeError(w, http.StatusConflict, client.CodeTopicExists, nil)
		return
	}
	// Defaults as an agent's shipped topic_defaults: 3 partitions,
	// replication factor 3 and min_insync_replicas 2, capped by the live
	// agents that pass every Consul check and are not being drained.
	f.mu.Lock()
	live := 0
	for _, a := range f.live {
		if !a.NotPassing && !a.Draining {
			live++
		}
	}
	f.mu.Unlock()
	if spec.Partitions == 0 {
		spec.Partitions = 3
	}
	if spec.ReplicationFactor == 0 {
		spec.ReplicationFactor = min(3, live)
	}
	if spec.MinInsyncReplicas == 0 {
		spec.MinInsyncReplicas = min(2, spec.ReplicationFactor)
	}
	info := client.TopicInfo{Name: spec.Name, Config: map[string]json.RawMessage{
		"replication_factor":  json.RawMessage(strconv.Itoa(spec.ReplicationFactor)),
		"min_insync_replicas": json.RawMessage(strconv.Itoa(spec.MinInsyncReplicas)),
	}}
	for p := range spec.Partitions {
		info.Partitions = append(info.Partitions, client.PartitionInfo{
			Partition: p, Leader: "n1", Epoch: 1, Replicas: []string{"n1"}, ISR: []string{"n1"},
		})
	}
	f.addTopic(info)
	fakeJSON(w, http.StatusCreated, info)
}

func (f *fakeClientAPI) list(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	names := []string{}
	for n := range f.topics {
		names = append(names, n)
	}
	fakeJSON(w, http.StatusOK, map[string]any{"topics": names})
}

func (f *fakeClientAPI) describe(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	info, ok := f.topics[r.PathValue("topic")]
	if !ok {
		fakeError(w, http.StatusNotFound, client.CodeUnknownTopic, nil)
		return
	}
	if f.leaderless > 0 {
		f.leaderless--
		unled := *info
		unled.Partitions = slices.Clone(info.Partitions)
		for i := range unled.Partitions {
			unled.Partitions[i].Leader = ""
		}
		info = &unled
	}
	fakeJSON(w, http.StatusOK, info)
}

func (f *fakeClientAPI) delete(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.topics[r.PathValue("topic")]; !ok {
		fakeError(w, http.StatusNotFound, client.CodeUnknownTopic, nil)
		return
	}
	delete(f.topics, r.PathValue("topic"))
	w.WriteHeader(http.StatusNoContent)
}

func (f *fakeClientAPI) produce(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	h, err := record.Verify(body, 0)
	if err != nil {
		fakeError(w, http.StatusBadRequest, client.CodeCorruptBatch, nil)
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.produced = append(f.produced, r.URL.RawQuery)
	info, ok := f.topics[r.PathValue("topic")]
	if !ok {
		fakeError(w, http.StatusNotFound, client.CodeUnknownTopic, nil)
		return
	}
	p, err := strconv.Atoi(r.URL.Query().Get("partition"))
	if err != nil || p < 0 || p >= len(info.Partitions) {
		fakeError(w, http.StatusNotFound, client.CodeUnknownPartition, nil)
		return
	}
	producer := ""
	if id := r.Header.Get(wire.HeaderProducerID); id != "" {
		seq, _ := strconv.ParseInt(r.Header.Get(wire.HeaderSequence), 10, 32)
		key := id + "/" + strconv.Itoa(p)
		if next, ok := f.nextSeq[key]; ok && seq != next {
			fakeError(w, http.StatusConflict, client.CodeOutOfOrderSequence, nil)
			return
		}
		f.nextSeq[key] = seq + int64(h.RecordCount())
		producer = id + "/" + r.Header.Get(wire.HeaderProducerEpoch) + "/" + strconv.FormatInt(seq, 10)
	}
	f.producer = append(f.producer, producer)
	part := &info.Partitions[p]
	stored := bytes.Clone(body)
	record.SetBaseOffset(stored, part.HighWatermark)
	record.SetLeaderEpoch(stored, part.Epoch)
	f.batches[info.Name][p] = append(f.batches[info.Name][p], stored)
	base := part.HighWatermark
	part.HighWatermark += int64(h.RecordCount())
	fakeJSON(w, http.StatusOK, map[string]any{
		"topic": info.Name, "partition": p, "base_offset": base, "last_offset": part.HighWatermark - 1,
		"count": h.RecordCount(), "epoch": part.Epoch,
	})
}

func (f *fakeClientAPI) fetch(w http.ResponseWriter, r *http.Request) {
	if r.URL.Query().Has("wait") {
		// A stand-in for a long poll, so that a following consumer does
		// not spin.
		time.Sleep(10 * time.Millisecond)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.unavailable > 0 {
		f.unavailable--
		w.Header().Set("Retry-After", "0")
		fakeError(w, http.StatusServiceUnavailable, client.CodeLeaderNotAvailable, map[string]any{"retriable": true})
		return
	}
	info, ok := f.topics[r.PathValue("topic")]
	p, err := strconv.Atoi(r.PathValue("partition"))
	if !ok || err != nil || p < 0 || p >= len(info.Partitions) {
		fakeError(w, http.StatusNotFound, client.CodeUnknownPartition, nil)
		return
	}
	part := info.Partitions[p]
	offsetParam := r.URL.Query().Get("offset")
	if r.URL.Query().Has("group") {
		var status int
		var code string
		if offsetParam, status, code = f.memberOffsetLocked(r, info.Name, part); code != "" {
			fakeError(w, status, code, nil)
			return
		}
	}
	var offset int64
	switch s := offsetParam; s {
	case "earliest":
		offset = part.LogStartOffset
	case "latest":
		offset = part.HighWatermark
	default:
		if offset, err = strconv.ParseInt(s, 10, 64); err != nil {
			fakeError(w, http.StatusBadRequest, client.CodeInvalidOffset, nil)
			return
		}
	}
	if offset < part.LogStartOffset || offset > part.HighWatermark {
		fakeError(w, http.StatusRequestedRangeNotSatisfiable, client.CodeOffsetOutOfRange,
			map[string]any{"log_start_offset": part.LogStartOffset, "high_watermark": part.HighWatermark})
		return
	}
	var body []byte
	for _, b := range f.batches[info.Name][p] {
		if h, _, _ := record.ParseHeader(b, 0); h.NextOffset() > offset {
			body = append(body, b...)
		}
	}
	w.Header().Set(client.HighWatermarkHeader, strconv.FormatInt(part.HighWatermark, 10))
	w.Header().Set(client.LogStartOffsetHeader, strconv.FormatInt(part.LogStartOffset, 10))
	w.Header().Set("Content-Type", client.BatchContentType)
	_, _ = w.Write(body)
}

// initProducer allocates producer ids; it does not check sequences.
func (f *fakeClientAPI) initProducer(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.producers++
	fakeJSON(w, http.StatusCreated, client.ProducerID{ID: 100 + f.producers})
}

// produceProducers is the producer headers of every batch appended so far.
func (f *fakeClientAPI) produceProducers() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.producer...)
}

// produceQueries is the raw query of every produce request so far.
func (f *fakeClientAPI) produceQueries() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.produced...)
}
