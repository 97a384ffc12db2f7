package agent

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/valyala/fasthttp"

	"github.com/logagent/logagent/agent/jsonrecord"
	"github.com/logagent/logagent/agent/reply"
	"github.com/logagent/logagent/record"
	"github.com/logagent/logagent/segstore"

	"github.com/logagent/logagent/wire"
)

// An application/json produce body:
//
//	{"records":[{"key":"k","value":"v","headers":{"h":"x"}},
//	            {"key_base64":"AAE=","value_base64":"/w=="}]}
//
// key and value are UTF-8 text; key_base64 and value_base64 carry any bytes
// (standard base64 with padding) and exclude the text field of the same
// name. A record without a key has no key; one without a value has an
// empty value. headers maps each header name to its text value, or to
// null for a null value. buildJSON reads it record by record, each with
// jsonrecord.Parse, which refuses what encoding/json would change without
// a word: a name given twice, a field name in another case, a string that
// is not UTF-8.

// bytesField reads a field given as text or base64, not both.
func bytesField(name string, text, b64 *string) ([]byte, error) {
	switch {
	case text != nil && b64 != nil:
		return nil, fmt.Errorf("%s and %s_base64 are exclusive", name, name)
	case text != nil:
		return []byte(*text), nil
	case b64 != nil:
		b, err := base64.StdEncoding.DecodeString(*b64)
		if err != nil {
			return nil, fmt.Errorf("%s_base64: %w", name, err)
		}
		return b, nil
	}
	return nil, nil
}

// buildJSON turns a JSON produce body into a batch, its record count and
// the first record's key (which places the request when no partition or
// key parameter does). A key parameter is the key of records that name
// none.
func (a *Agent) buildJSON(body, keyParam []byte) ([]byte, int, []byte, error) {
	var b record.Builder
	ts := a.now().UnixMilli()
	var firstKey []byte
	err := reply.DecodeArrayField(body, "records", func(i int, raw *json.RawMessage) error {
		r, err := jsonrecord.Parse(*raw)
		if err != nil {
			return reply.NewAPIError(fasthttp.StatusBadRequest, wire.CodeInvalidRequest, fmt.Sprintf("record %d: %v", i, err), false)
		}
		key, err := bytesField("key", r.Key, r.KeyBase64)
		if err == nil && key == nil {
			key = keyParam
		}
		var value []byte
		if err == nil {
			value, err = bytesField("value", r.Value, r.ValueBase64)
		}
		if err != nil {
			return reply.NewAPIError(fasthttp.StatusBadRequest, wire.CodeInvalidRequest, fmt.Sprintf("record %d: %v", i, err), false)
		}
		if i == 0 {
			firstKey = key
		}
		if value == nil {
			value = []byte{}
		}
		return a.addRecord(&b, ts, key, value, jsonHeaders(r.Headers))
	})
	var apiErr *reply.APIError
	switch {
	case errors.As(err, &apiErr):
		return nil, 0, nil, err
	case err != nil:
		return nil, 0, nil, reply.NewAPIError(fasthttp.StatusBadRequest, wire.CodeInvalidRequest, "body is not a JSON produce request: "+err.Error(), false)
	}
	batch, err := a.finishBatch(&b)
	return batch, b.Len(), firstKey, err
}

// jsonHeaders orders headers by name, so one body always makes the same
// batch.
func jsonHeaders(h []record.RecordHeader) []record.RecordHeader {
	slices.SortFunc(h, func(x, y record.RecordHeader) int { return strings.Compare(x.Key, y.Key) })
	return h
}

// buildOne turns an application/octet-stream body into a batch of one
// record whose value is the body.
func (a *Agent) buildOne(body, key []byte) ([]byte, int, error) {
	var b record.Builder
	if err := a.addRecord(&b, a.now().UnixMilli(), key, body, nil); err != nil {
		return nil, 0, err
	}
	batch, err := a.finishBatch(&b)
	return batch, 1, err
}

// addRecord adds one record, refusing one over limits.max_record_bytes,
// and records that together make a batch over the log's batch limit
// (records of a few bytes cost more as a batch than as text: a 16 MiB body
// of 2-byte lines made a batch of 91 MB, refused by the log as corrupt).
// The record limit applies to its encoded length too, which the log's
// readers bound (an ndjson fetch, the coalescer, a lookup by time): a
// 92-byte value under a 100-byte limit was written as a record of 101
// bytes that no ndjson fetch could then read.
func (a *Agent) addRecord(b *record.Builder, ts int64, key, value []byte, headers []record.RecordHeader) error {
	size := len(key) + len(value)
	for _, h := range headers {
		size += len(h.Key) + len(h.Value)
	}
	// The encoded length is always above the bytes given: one check
	// bounds both.
	if limit, encoded := a.recordLimits.MaxRecordBytes, b.RecordLen(ts, key, value, headers); limit > 0 && encoded > limit {
		return reply.NewAPIError(fasthttp.StatusRequestEntityTooLarge, wire.CodeRecordTooLarge,
			fmt.Sprintf("a record of %d bytes, %d encoded, is over limits.max_record_bytes (%d)", size, encoded, limit), false)
	}
	if err := b.Add(ts, key, value, headers); err != nil {
		return reply.NewAPIError(fasthttp.StatusRequestEntityTooLarge, wire.CodeRequestTooLarge, err.Error(), false)
	}
	if limit := a.recordLimits.MaxBatchBytes; limit > 0 && b.Size() > limit {
		return reply.NewAPIError(fasthttp.StatusRequestEntityTooLarge, wire.CodeRequestTooLarge,
			fmt.Sprintf("the first %d records make a batch of %d bytes, over the %d one batch may hold: send them in more requests", b.Len(), b.Size(), limit), false)
	}
	return nil
}

func (a *Agent) finishBatch(b *record.Builder) ([]byte, error) {
	if b.Len() == 0 {
		return nil, reply.NewAPIError(fasthttp.StatusBadRequest, wire.CodeInvalidRequest, "the body holds no records", false)
	}
	batch, err := b.AppendTo(nil)
	if err != nil {
		return nil, reply.NewAPIError(fasthttp.StatusRequestEntityTooLarge, wire.CodeRequestTooLarge, err.Error(), false)
	}
	return batch, nil
}

// ndjsonRecord is one line of a fetch answered as application/x-ndjson:
//
//	{"offset":42,"timestamp":1764410000000,"key":"k","value":"v","headers":{"h":"x"}}
//	{"offset":43,"timestamp":1764410000001,"value_base64":"/w=="}
//
// key and value are strings when they are valid UTF-8, else key_base64 and
// value_base64 (standard base64); a null key or value (a tombstone) has
// neither field, so it stays apart from an empty one. Header values follow
// the same rule, binary ones in headers_base64, a null one null.
type ndjsonRecord struct {
	Offset        int64              `json:"offset"`
	Timestamp     int64              `json:"timestamp"`
	Key           *string            `json:"key,omitempty"`
	KeyBase64     *string            `json:"key_base64,omitempty"`
	Value         *string            `json:"value,omitempty"`
	ValueBase64   *string            `json:"value_base64,omitempty"`
	Headers       map[string]*string `json:"headers,omitempty"`
	HeadersBase64 map[string]string  `json:"headers_base64,omitempty"`
}

func textOrBase64(b []byte) (text, b64 *string) {
	if utf8.Valid(b) {
		s := string(b)
		return &s, nil
	}
	s := base64.StdEncoding.EncodeToString(b)
	return nil, &s
}

// writeNDJSON reads a log region and answers with its records from offset
// on, one JSON object per line, at most maxBytes of them but always the
// first line. The region is read into memory: it is bounded by the fetch's
// max_bytes and one batch. The rendering is held to maxBytes as well as the
// batches read: JSON is several times a batch of small records or of
// control characters (6 bytes each), and one batch rendered whole was over
// the fetch proxy's bound, which refused the offset for ever.
func (a *Agent) writeNDJSON(ctx *fasthttp.RequestCtx, region *segstore.Region, offset, maxBytes int64) error {
	raw, err := io.ReadAll(region)
	region.Close()
	if err != nil {
		return fmt.Errorf("agent: read fetch region: %w", err)
	}
	d := a.logDecoders.Get().(*record.Decoder)
	defer a.logDecoders.Put(d)
	var out, line bytes.Buffer
	enc := json.NewEncoder(&line)
	full := false
	for len(raw) > 0 && !full {
		h, size, err := record.ParseHeader(raw, maxBatchBytes(a.cfg))
		if err != nil {
			return fmt.Errorf("agent: fetch region: %w", err)
		}
		it, err := d.Records(raw[:size])
		if err != nil {
			return fmt.Errorf("agent: fetch region batch at %d: %w", h.BaseOffset(), err)
		}
		for it.Next() {
			r := it.Record()
			if r.Offset < offset {
				continue
			}
			line.Reset()
			if err := enc.Encode(ndjsonLine(r)); err != nil {
				return fmt.Errorf("agent: encode record %d: %w", r.Offset, err)
			}
			if out.Len() > 0 && int64(out.Len()+line.Len()) > maxBytes {
				full = true
				break
			}
			out.Write(line.Bytes())
		}
		if err := it.Err(); !full && err != nil {
			return fmt.Errorf("agent: fetch region batch at %d: %w", h.BaseOffset(), err)
		}
		raw = raw[size:]
	}
	ctx.SetContentType(wire.ContentTypeNDJSON)
	ctx.SetStatusCode(fasthttp.StatusOK)
	ctx.SetBody(out.Bytes())
	return nil
}

// ndjsonLine is a record as an ndjson fetch renders it. A header key that
// repeats keeps its last value, in headers or in headers_base64 as that
// value is text or not: a JSON object holds one value per name (the binary
// format keeps them all). A key that is not UTF-8 has U+FFFD in place of
// each bad byte, so two such keys may be one key repeated. (A key whose
// last value was binary and an earlier one text came out in both objects;
// two keys that were not UTF-8 came out as one name twice, in an order
// that was not theirs: a JSON parser kept either.)
func ndjsonLine(r record.Record) ndjsonRecord {
	rec := ndjsonRecord{Offset: r.Offset, Timestamp: r.Timestamp}
	if r.Key != nil {
		rec.Key, rec.KeyBase64 = textOrBase64(r.Key)
	}
	if r.Value != nil {
		rec.Value, rec.ValueBase64 = textOrBase64(r.Value)
	}
	for _, hd := range r.Headers {
		key := utf8Text(hd.Key)
		if hd.Value == nil {
			rec.Headers = setHeader(rec.Headers, key, nil)
			delete(rec.HeadersBase64, key)
		} else if text, b64 := textOrBase64(hd.Value); text != nil {
			rec.Headers = setHeader(rec.Headers, key, text)
			delete(rec.HeadersBase64, key)
		} else {
			rec.HeadersBase64 = setHeader(rec.HeadersBase64, key, *b64)
			delete(rec.Headers, key)
		}
	}
	return rec
}

// utf8Text is s with U+FFFD in place of each byte that is not part of
// valid UTF-8, as encoding/json writes a string.
func utf8Text(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && n == 1 {
			b.WriteRune(utf8.RuneError)
		} else {
			b.WriteString(s[i : i+n])
		}
		i += n
	}
	return b.String()
}

func setHeader[V any](m map[string]V, k string, v V) map[string]V {
	if m == nil {
		m = map[string]V{}
	}
	m[k] = v
	return m
}

// fetchFormat is the answer format an Accept header picks: the binary
// batch format when it allows it, else ndjson when it allows that.
func fetchFormat(accept []byte) (string, bool) {
	if acceptsBatches(accept) {
		return wire.ContentTypeBatch, true
	}
	if acceptsType(accept, wire.ContentTypeNDJSON) {
		return wire.ContentTypeNDJSON, true
	}
	return "", false
}
