package testcluster

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/logagent/logagent/wire"
)

// ProducerID is an idempotent producer's identity as POST /v1/producers
// answers it.
type ProducerID struct {
	ID    int64 `json:"producer_id"`
	Epoch int16 `json:"producer_epoch"`
}

// Idempotence is what an idempotent producer's produce request carries: its
// identity and the sequence of the request's first record within that
// producer and partition.
type Idempotence struct {
	ProducerID
	Sequence int32
}

// Client is a producer's connection to one client API address: an agent's
// ClientAddr or the proxy in front of it (Agent.ClientProxy).
type Client struct {
	base string // scheme://host:port
	http *http.Client
}

// NewClient sends requests to addr, each given at most timeout, so that a
// client whose answer a cut holds learns that the outcome is unknown, as a
// real one would, instead of waiting for the heal. Close it after use.
func NewClient(addr string, timeout time.Duration) *Client {
	// A transport of its own: its connections are this client's alone,
	// and Close ends them.
	return &Client{base: "http://" + addr, http: &http.Client{Timeout: timeout, Transport: &http.Transport{}}}
}

// Close closes the idle connections of a NewClient, ending their
// goroutines.
func (c *Client) Close() { c.http.CloseIdleConnections() }

// client is a Client of this agent's own address over the cluster's HTTP
// client (not to be closed).
func (a *Agent) client() *Client {
	return &Client{base: a.c.Scheme() + "://" + a.ClientAddr, http: a.c.http}
}

// InitProducer asks for a new producer id, or with bump for the next epoch
// of bump.ID, which fences its older instance. The answer is what to use:
// a new id when bump's epochs ran out.
func (c *Client) InitProducer(bump *ProducerID) (ProducerID, error) {
	var body []byte
	if bump != nil {
		body, _ = json.Marshal(map[string]int64{"producer_id": bump.ID})
	}
	req, err := http.NewRequest(http.MethodPost, c.base+"/v1/producers", bytes.NewReader(body))
	if err != nil {
		return ProducerID{}, err
	}
	req.Header.Set("Content-Type", wire.ContentTypeJSON)
	var p ProducerID
	err = send(c.http, req, &p)
	return p, err
}

// Produce sends one acks=all produce request of body in contentType to the
// partition; idem, when not nil, makes it an idempotent producer's (the
// three headers). Resending the same body with the same idem after an
// unknown outcome is what makes the resend safe. net/http never resends a
// POST itself once any of it was written, so every copy the agent may have
// received is one the caller sent.
func (c *Client) Produce(topic string, partition int, contentType string, body []byte, timeout time.Duration, idem *Idempotence) (Produced, error) {
	q := url.Values{"partition": {strconv.Itoa(partition)}, "acks": {"all"}, "timeout": {timeout.String()}}
	req, err := http.NewRequest(http.MethodPost, c.base+"/v1/topics/"+topic+"/records?"+q.Encode(), bytes.NewReader(body))
	if err != nil {
		return Produced{}, err
	}
	req.Header.Set("Content-Type", contentType)
	if idem != nil {
		req.Header.Set(wire.HeaderProducerID, strconv.FormatInt(idem.ID, 10))
		req.Header.Set(wire.HeaderProducerEpoch, strconv.Itoa(int(idem.Epoch)))
		req.Header.Set(wire.HeaderSequence, strconv.FormatInt(int64(idem.Sequence), 10))
	}
	var p Produced
	err = send(c.http, req, &p)
	return p, err
}

// InitProducer is Client.InitProducer through this agent.
func (a *Agent) InitProducer(bump *ProducerID) (ProducerID, error) {
	return a.client().InitProducer(bump)
}

// ProduceIdempotent is Produce (acks=all) with the idempotence headers of
// producer p and the sequence of the body's first record.
func (a *Agent) ProduceIdempotent(topic string, partition int, contentType string, body []byte, p ProducerID, seq int32, timeout time.Duration) (Produced, error) {
	return a.client().Produce(topic, partition, contentType, body, timeout, &Idempotence{ProducerID: p, Sequence: seq})
}
