package client

import "sync/atomic"

// Stats are counts since the Client (or the Producer) was made. Bytes are
// those of the records' keys, values and header keys and values, not of
// the encoded batches.
type Stats struct {
	// RecordsProduced and BytesProduced: records the agent acknowledged
	// (at the producer's acks).
	RecordsProduced int64
	BytesProduced   int64
	// ProduceErrors: records that failed, their outcome unknown included.
	ProduceErrors int64
	// ProduceRetries: produce requests (and producer id requests) sent
	// again after a failed attempt.
	ProduceRetries int64
	// InFlight and InFlightBytes: records given to Produce or Send whose
	// outcome is not known yet, queued or sent.
	InFlight      int64
	InFlightBytes int64
	// RecordsConsumed and BytesConsumed: records that Poll and Next
	// returned, of every kind of consumer.
	RecordsConsumed int64
	BytesConsumed   int64
	// FetchErrors: fetches that failed, retried or not; FetchRetries: those
	// retried.
	FetchErrors  int64
	FetchRetries int64
}

// Stats are the counts of every producer and consumer made from the Client.
func (c *Client) Stats() Stats { return c.stats.snapshot() }

// Stats are the counts of this Producer's records (the consume fields are
// 0).
func (p *Producer) Stats() Stats { return p.stats.snapshot() }

// counters are a Stats being counted.
type counters struct {
	recordsProduced, bytesProduced atomic.Int64
	produceErrors, produceRetries  atomic.Int64
	inFlight, inFlightBytes        atomic.Int64
	recordsConsumed, bytesConsumed atomic.Int64
	fetchErrors, fetchRetries      atomic.Int64
}

func (c *counters) snapshot() Stats {
	return Stats{
		RecordsProduced: c.recordsProduced.Load(),
		BytesProduced:   c.bytesProduced.Load(),
		ProduceErrors:   c.produceErrors.Load(),
		ProduceRetries:  c.produceRetries.Load(),
		InFlight:        c.inFlight.Load(),
		InFlightBytes:   c.inFlightBytes.Load(),
		RecordsConsumed: c.recordsConsumed.Load(),
		BytesConsumed:   c.bytesConsumed.Load(),
		FetchErrors:     c.fetchErrors.Load(),
		FetchRetries:    c.fetchRetries.Load(),
	}
}

// recordBytes is what Stats count of a record.
func recordBytes(r *Record) int64 {
	n := len(r.Key) + len(r.Value)
	for _, h := range r.Headers {
		n += len(h.Key) + len(h.Value)
	}
	return int64(n)
}

// consumed counts records handed to the caller.
func (c *counters) consumed(records []Record) {
	if len(records) == 0 {
		return
	}
	var n int64
	for i := range records {
		n += recordBytes(&records[i])
	}
	c.recordsConsumed.Add(int64(len(records)))
	c.bytesConsumed.Add(n)
}
