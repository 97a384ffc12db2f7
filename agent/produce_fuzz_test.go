package agent

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"testing"

	"github.com/logagent/logagent/agent/reply"
	"github.com/logagent/logagent/record"
	"github.com/logagent/logagent/wire"
)

// fuzzContentTypes are the produce body formats; the fuzzer picks one by
// index.
var fuzzContentTypes = []string{wire.ContentTypeBatch, wire.ContentTypeJSON, wire.ContentTypeNDJSON, wire.ContentTypeOctetStream}

// FuzzDecodeProduceBody: whatever a producer sends, in any of the body
// formats, decodeProduceBody answers with an APIError of a 4xx status, or a
// batch that the log's own decoder takes, within the log's batch limit,
// holding as many records as it says; a JSON body's records are the ones
// encoding/json reads from it.
func FuzzDecodeProduceBody(f *testing.F) {
	a := unitAgent(f)
	var b record.Builder
	_ = b.Add(1, []byte("k"), []byte("binary"), nil)
	good, _ := b.AppendTo(nil)
	_ = b.SetCodec(record.CodecGzip)
	_ = b.Add(2, nil, []byte("v"), []record.RecordHeader{{Key: "h", Value: []byte("x")}})
	gz, _ := b.AppendTo(nil)
	for _, s := range []struct {
		ct   int
		body []byte
	}{
		{0, good},
		{0, gz},
		{1, []byte(`{"records":[{"key":"k1","value":"v1","headers":{"b":"2","a":"1","n":null}},{"value_base64":"/wA="},{}]}`)},
		{1, []byte(`{"records":[{"key_base64":"AAE=","value":"\u00e9"}]}`)},
		{1, []byte(`{"records":null}`)},
		{2, []byte("a\nbb\r\n\nccc")},
		{3, []byte("a\nb\x00")},
	} {
		f.Add(uint8(s.ct), s.body)
	}
	f.Fuzz(func(t *testing.T, ct uint8, body []byte) {
		contentType := fuzzContentTypes[int(ct)%len(fuzzContentTypes)]
		batch, count, _, err := a.decodeProduceBody([]byte(contentType), body, []byte("kp"), true)
		if err != nil {
			var e *reply.APIError
			if !errors.As(err, &e) || e.Status < 400 || e.Status >= 500 {
				t.Fatalf("%s: error %v is no 4xx APIError", contentType, err)
			}
			return
		}
		if limit := a.recordLimits.MaxBatchBytes; len(batch) > limit {
			t.Fatalf("%s: a batch of %d bytes, over the log's limit %d", contentType, len(batch), limit)
		}
		it, err := record.NewDecoder(a.recordLimits).Records(batch)
		if err != nil {
			t.Fatalf("%s: the log refuses the batch: %v", contentType, err)
		}
		var got []record.Record
		for it.Next() {
			r := it.Record()
			r.Key, r.Value = bytes.Clone(r.Key), bytes.Clone(r.Value)
			got = append(got, r)
		}
		if err := it.Err(); err != nil {
			t.Fatalf("%s: the log refuses the batch: %v", contentType, err)
		}
		if len(got) != count {
			t.Fatalf("%s: count %d, the batch holds %d records", contentType, count, len(got))
		}
		if contentType == wire.ContentTypeJSON {
			checkJSONRecords(t, body, got)
		}
	})
}

// checkJSONRecords compares the records built from an accepted JSON body
// with the ones encoding/json reads from it.
func checkJSONRecords(t *testing.T, body []byte, got []record.Record) {
	t.Helper()
	var want struct {
		Records []struct {
			Key         *string            `json:"key"`
			KeyBase64   *string            `json:"key_base64"`
			Value       *string            `json:"value"`
			ValueBase64 *string            `json:"value_base64"`
			Headers     map[string]*string `json:"headers"`
		} `json:"records"`
	}
	if err := json.Unmarshal(body, &want); err != nil {
		t.Fatalf("accepted %q, encoding/json refuses it: %v", body, err)
	}
	if len(want.Records) != len(got) {
		t.Fatalf("%q: %d records, encoding/json reads %d", body, len(got), len(want.Records))
	}
	field := func(text, b64 *string) []byte {
		switch {
		case text != nil:
			return []byte(*text)
		case b64 != nil:
			v, err := base64.StdEncoding.DecodeString(*b64)
			if err != nil {
				t.Fatalf("%q: accepted bad base64: %v", body, err)
			}
			return v
		}
		return nil
	}
	for i, w := range want.Records {
		key := field(w.Key, w.KeyBase64)
		if key == nil {
			key = []byte("kp")
		}
		if !bytes.Equal(got[i].Key, key) || !bytes.Equal(got[i].Value, field(w.Value, w.ValueBase64)) {
			t.Fatalf("%q: record %d is %q=%q, encoding/json reads %q=%q", body, i, got[i].Key, got[i].Value, key, field(w.Value, w.ValueBase64))
		}
		if len(got[i].Headers) != len(w.Headers) {
			t.Fatalf("%q: record %d has %d headers, encoding/json reads %d", body, i, len(got[i].Headers), len(w.Headers))
		}
		for _, h := range got[i].Headers {
			v, ok := w.Headers[h.Key]
			if !ok || (v == nil) != (h.Value == nil) || v != nil && *v != string(h.Value) {
				t.Fatalf("%q: record %d header %q is %q", body, i, h.Key, h.Value)
			}
		}
	}
}
