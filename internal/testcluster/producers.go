package testcluster

import (
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

// InitProducer asks this agent for a new producer id, or with bump for the
// next epoch of bump.ID.
func (a *Agent) InitProducer(bump *ProducerID) (ProducerID, error) {
	var body []byte
	if bump != nil {
		body, _ = json.Marshal(map[string]int64{"producer_id": bump.ID})
	}
	var p ProducerID
	err := a.do(http.MethodPost, a.url("/v1/producers", nil), "application/json", body, &p)
	return p, err
}

// ProduceIdempotent is Produce (acks=all) with the idempotence headers of
// producer p and the sequence of the body's first record.
func (a *Agent) ProduceIdempotent(topic string, partition int, contentType string, body []byte, p ProducerID, seq int32, timeout time.Duration) (Produced, error) {
	q := url.Values{"partition": {strconv.Itoa(partition)}, "acks": {"all"}, "timeout": {timeout.String()}}
	h := http.Header{}
	h.Set(wire.HeaderProducerID, strconv.FormatInt(p.ID, 10))
	h.Set(wire.HeaderProducerEpoch, strconv.Itoa(int(p.Epoch)))
	h.Set(wire.HeaderSequence, strconv.Itoa(int(seq)))
	var out Produced
	err := a.doWith(http.MethodPost, a.url("/v1/topics/"+topic+"/records", q), contentType, h, body, &out)
	return out, err
}
