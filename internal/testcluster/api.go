package testcluster

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"time"

	"github.com/logagent/logagent/wire"
)

// APIError is an error answer of the client API.
type APIError struct {
	Status         int    `json:"-"`
	Code           string `json:"code"`
	Message        string `json:"message"`
	Retriable      bool   `json:"retriable"`
	Leader         string `json:"leader"`
	LeaderAddress  string `json:"leader_address"`
	LogStartOffset *int64 `json:"log_start_offset"`
	HighWatermark  *int64 `json:"high_watermark"`
}

func (e *APIError) Error() string {
	return fmt.Sprintf("%d %s: %s", e.Status, e.Code, e.Message)
}

// TopicSpec creates a topic; zero fields take the agents' defaults.
type TopicSpec struct {
	Name              string `json:"name"`
	Partitions        int    `json:"partitions,omitempty"`
	ReplicationFactor int    `json:"replication_factor,omitempty"`
	MinInsyncReplicas int    `json:"min_insync_replicas,omitempty"`
}

// Topic is a topic as an agent describes it.
type Topic struct {
	Name       string      `json:"name"`
	Partitions []Partition `json:"partitions"`
}

// Partition is one partition as an agent describes it; the offsets are
// that agent's replica's, absent when it has none.
type Partition struct {
	Partition      int      `json:"partition"`
	Leader         string   `json:"leader"`
	Epoch          int32    `json:"epoch"`
	Replicas       []string `json:"replicas"`
	ISR            []string `json:"isr"`
	HighWatermark  *int64   `json:"high_watermark"`
	LogStartOffset *int64   `json:"log_start_offset"`
	LogEndOffset   *int64   `json:"log_end_offset"`
	Role           string   `json:"role"`
}

// Produced is a successful produce answer.
type Produced struct {
	Partition  int    `json:"partition"`
	BaseOffset *int64 `json:"base_offset"`
	LastOffset *int64 `json:"last_offset"`
	Count      int    `json:"count"`
	Epoch      *int32 `json:"epoch"`
	// Duplicate says an idempotent resend was answered with the first
	// copy's offsets.
	Duplicate bool `json:"duplicate"`
}

// Fetched is a fetch answer: raw batches and the replica's positions.
type Fetched struct {
	Batches        []byte
	HighWatermark  int64
	LogStartOffset int64
}

// Content types of produce bodies.
const (
	ContentTypeBatch  = wire.ContentTypeBatch
	ContentTypeNDJSON = wire.ContentTypeNDJSON
)

func (a *Agent) url(path string, query url.Values) string {
	u := a.c.Scheme() + "://" + a.ClientAddr + path
	if len(query) > 0 {
		u += "?" + query.Encode()
	}
	return u
}

// do sends a request and decodes a JSON answer into out, or returns the
// API error.
func (a *Agent) do(method, u, contentType string, body []byte, out any) error {
	req, err := http.NewRequest(method, u, bytes.NewReader(body))
	if err != nil {
		return err
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	return send(a.c.http, req, out)
}

// send sends req with client and decodes a JSON answer into out, or
// returns the API error.
func send(client *http.Client, req *http.Request, out any) error {
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode >= 300 {
		return decodeAPIError(resp.StatusCode, b)
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(b, out); err != nil {
		return fmt.Errorf("testcluster: %s %s: %w: %s", req.Method, req.URL, err, b)
	}
	return nil
}

func decodeAPIError(status int, body []byte) error {
	var wrapper struct {
		Error APIError `json:"error"`
	}
	if err := json.Unmarshal(body, &wrapper); err != nil || wrapper.Error.Code == "" {
		return &APIError{Status: status, Code: "undecodable", Message: string(body)}
	}
	wrapper.Error.Status = status
	return &wrapper.Error
}

// CreateTopic creates a topic through this agent.
func (a *Agent) CreateTopic(spec TopicSpec) error {
	body, _ := json.Marshal(spec)
	return a.do(http.MethodPost, a.url("/v1/topics", nil), "application/json", body, nil)
}

// Describe describes a topic as this agent sees it.
func (a *Agent) Describe(topic string) (Topic, error) {
	var t Topic
	err := a.do(http.MethodGet, a.url("/v1/topics/"+topic, nil), "", nil, &t)
	return t, err
}

// DescribePartition is Describe for one partition.
func (a *Agent) DescribePartition(topic string, partition int) (Partition, error) {
	t, err := a.Describe(topic)
	if err != nil {
		return Partition{}, err
	}
	if partition >= len(t.Partitions) {
		return Partition{}, fmt.Errorf("testcluster: %s has no partition %d", topic, partition)
	}
	return t.Partitions[partition], nil
}

// Produce sends one produce request to this agent: body in contentType,
// acks "all", "1" or "0".
func (a *Agent) Produce(topic string, partition int, contentType string, body []byte, acks string, timeout time.Duration) (Produced, error) {
	q := url.Values{"partition": {strconv.Itoa(partition)}, "acks": {acks}, "timeout": {timeout.String()}}
	var p Produced
	err := a.do(http.MethodPost, a.url("/v1/topics/"+topic+"/records", q), contentType, body, &p)
	return p, err
}

// Fetch reads batches from this agent's replica.
func (a *Agent) Fetch(topic string, partition int, offset int64, maxBytes int, wait time.Duration) (Fetched, error) {
	q := url.Values{"offset": {strconv.FormatInt(offset, 10)}, "max_bytes": {strconv.Itoa(maxBytes)}}
	if wait > 0 {
		q.Set("wait", wait.String())
	}
	resp, err := a.c.http.Get(a.url(fmt.Sprintf("/v1/topics/%s/partitions/%d/records", topic, partition), q))
	if err != nil {
		return Fetched{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return Fetched{}, err
	}
	if resp.StatusCode != http.StatusOK {
		return Fetched{}, decodeAPIError(resp.StatusCode, b)
	}
	f := Fetched{Batches: b}
	if f.HighWatermark, err = strconv.ParseInt(resp.Header.Get(wire.HeaderHighWatermark), 10, 64); err != nil {
		return Fetched{}, fmt.Errorf("testcluster: high watermark header: %w", err)
	}
	if f.LogStartOffset, err = strconv.ParseInt(resp.Header.Get(wire.HeaderLogStartOffset), 10, 64); err != nil {
		return Fetched{}, fmt.Errorf("testcluster: log start offset header: %w", err)
	}
	return f, nil
}

// WaitLeader waits until a running agent leads the partition (by its own
// account) and returns it with its epoch.
func (c *Cluster) WaitLeader(topic string, partition int, timeout time.Duration) (*Agent, int32) {
	c.t.Helper()
	var leader *Agent
	var epoch int32
	c.WaitFor(timeout, fmt.Sprintf("a leader of %s/%d", topic, partition), func() bool {
		for _, a := range c.Agents {
			if !a.Running() {
				continue
			}
			p, err := a.DescribePartition(topic, partition)
			if err == nil && p.Role == "leader" {
				leader, epoch = a, p.Epoch
				return true
			}
		}
		return false
	})
	return leader, epoch
}

// WaitISR waits until the leader's ISR of the partition is exactly want
// (in any order), and returns the leader.
func (c *Cluster) WaitISR(topic string, partition int, want []string, timeout time.Duration) *Agent {
	c.t.Helper()
	var leader *Agent
	sorted := slices.Sorted(slices.Values(want))
	c.WaitFor(timeout, fmt.Sprintf("ISR %v of %s/%d", want, topic, partition), func() bool {
		for _, a := range c.Agents {
			if !a.Running() {
				continue
			}
			p, err := a.DescribePartition(topic, partition)
			if err == nil && p.Role == "leader" && slices.Equal(slices.Sorted(slices.Values(p.ISR)), sorted) {
				leader = a
				return true
			}
		}
		return false
	})
	return leader
}

// WaitFor polls cond every 20ms until it holds, failing the test after
// timeout.
func (c *Cluster) WaitFor(timeout time.Duration, what string, cond func() bool) {
	c.t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			c.t.Fatalf("testcluster: timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Get sends a GET to this agent's client API with an Accept header and
// returns the status and body, whatever the status.
func (a *Agent) Get(path, accept string) (int, []byte, error) {
	return a.raw(http.MethodGet, path, "", accept, nil)
}

// Send sends a request to this agent's client API and returns the status
// and body, whatever the status.
func (a *Agent) Send(method, path, contentType string, body []byte) (int, []byte, error) {
	return a.raw(method, path, contentType, "", body)
}

func (a *Agent) raw(method, path, contentType, accept string, body []byte) (int, []byte, error) {
	req, err := http.NewRequest(method, a.url(path, nil), bytes.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	resp, err := a.c.http.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}
