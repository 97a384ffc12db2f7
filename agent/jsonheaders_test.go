package agent

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/valyala/fasthttp"

	"github.com/logagent/logagent/agent/reply"
	"github.com/logagent/logagent/record"
	"github.com/logagent/logagent/segstore"

	"github.com/logagent/logagent/wire"
)

// TestJSONProduceRefusesWhatJSONWouldChange: encoding/json took a record
// whose headers repeat a name (the last value kept, the others lost), a
// record field given twice or in another case ({"value":"a","VALUE":"b"}
// wrote "b"), strings that are not UTF-8 (raw bytes, or an escaped lone
// surrogate: U+FFFD written in their place, another header key than the
// client's) and a null record (an empty record written), and made a null
// header value empty. Each is now refused 400 invalid_request naming the
// record, nothing written; a null header value is a null header.
func TestJSONProduceRefusesWhatJSONWouldChange(t *testing.T) {
	a := unitAgent(t)
	first := `{"value":"fine","headers":{"a":"1"}},`
	for _, tc := range []struct {
		name, record string
		message      []string // what the error message must say
	}{
		{"repeated header key", `{"value":"v","headers":{"h":"1","h":"2"}}`, []string{"record 1", `header "h" given twice`}},
		{"repeated header key, one null", `{"value":"v","headers":{"h":null,"h":"2"}}`, []string{"record 1", `header "h" given twice`}},
		{"repeated field", `{"value":"a","value":"b"}`, []string{"record 1", `field "value" given twice`}},
		{"field in another case", `{"value":"a","VALUE":"b"}`, []string{"record 1", `unknown field "VALUE"`}},
		{"field in title case", `{"Value":"a"}`, []string{"record 1", `unknown field "Value"`}},
		{"header key not UTF-8", "{\"value\":\"v\",\"headers\":{\"k\xff\":\"1\"}}", []string{"record 1", "byte 26", "not UTF-8"}},
		{"header value not UTF-8", "{\"value\":\"v\",\"headers\":{\"k\":\"\xc3\"}}", []string{"record 1", "not UTF-8"}},
		{"value not UTF-8", "{\"value\":\"\xed\xa0\x80\"}", []string{"record 1", "not UTF-8"}},
		{"key not UTF-8", "{\"key\":\"\xfe\",\"value\":\"v\"}", []string{"record 1", "not UTF-8"}},
		{"header key lone high surrogate", `{"value":"v","headers":{"\ud800":"1"}}`, []string{"record 1", `\ud800`, "surrogate"}},
		{"header key lone low surrogate", `{"value":"v","headers":{"x\uDC00":"1"}}`, []string{"record 1", `\uDC00`, "surrogate"}},
		{"value high surrogate then a letter", `{"value":"\ud83d\u0041"}`, []string{"record 1", `\ud83d`, "surrogate"}},
		{"key high surrogate at the end", `{"key":"a\ud83d","value":"v"}`, []string{"record 1", `\ud83d`, "surrogate"}},
		{"null record", `null`, []string{"record 1", "object"}},
		{"header value a number", `{"value":"v","headers":{"h":1}}`, []string{"record 1", `header "h"`}},
		{"headers an array", `{"value":"v","headers":[["h","1"]]}`, []string{"record 1", "headers"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body := []byte(`{"records":[` + first + tc.record + `]}`)
			batch, _, _, err := a.decodeProduceBody([]byte(wire.ContentTypeJSON), body, nil, false)
			var e *reply.APIError
			if !errors.As(err, &e) || e.Status != fasthttp.StatusBadRequest || e.Code != wire.CodeInvalidRequest {
				var got []string
				if batch != nil {
					_, values, _ := records(t, batch)
					got = values
				}
				t.Fatalf("%s: got %v (records %q), want 400 invalid_request", body, err, got)
			}
			for _, m := range tc.message {
				if !strings.Contains(e.Message, m) {
					t.Errorf("message %q does not say %q", e.Message, m)
				}
			}
		})
	}
}

// TestJSONProduceHeaders: what a JSON body's headers make in the batch.
// A null header value was written as an empty one.
func TestJSONProduceHeaders(t *testing.T) {
	a := unitAgent(t)
	for _, tc := range []struct {
		name, headers string
		want          []record.RecordHeader
	}{
		{"ordered by name", `{"b":"2","a":"1"}`, []record.RecordHeader{{Key: "a", Value: []byte("1")}, {Key: "b", Value: []byte("2")}}},
		{"null and empty values", `{"n":null,"e":""}`, []record.RecordHeader{{Key: "e", Value: []byte{}}, {Key: "n", Value: nil}}},
		{"escapes", `{"t\u00e9\ud83d\ude00\t\"\\\/":"\ufffd\n"}`, []record.RecordHeader{{Key: "t\u00e9\U0001F600\t\"\\/", Value: []byte("\ufffd\n")}}},
		{"raw UTF-8", `{"clé":"välue 😀"}`, []record.RecordHeader{{Key: "clé", Value: []byte("välue 😀")}}},
		{"null headers", `null`, nil},
		{"no headers", `{}`, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body := []byte(`{"records":[{"value":"v","headers":` + tc.headers + `}]}`)
			batch, count, _, err := a.decodeProduceBody([]byte(wire.ContentTypeJSON), body, nil, false)
			if err != nil || count != 1 {
				t.Fatalf("%s: %d records, %v", body, count, err)
			}
			it, err := record.NewDecoder(record.Limits{}).Records(batch)
			if err != nil || !it.Next() {
				t.Fatalf("decode: %v %v", err, it.Err())
			}
			got := it.Record().Headers
			if len(got) != len(tc.want) {
				t.Fatalf("headers %q, want %q", got, tc.want)
			}
			for i, h := range got {
				w := tc.want[i]
				if h.Key != w.Key || !bytes.Equal(h.Value, w.Value) || (h.Value == nil) != (w.Value == nil) {
					t.Errorf("header %d: %q=%q (null %t), want %q=%q (null %t)", i, h.Key, h.Value, h.Value == nil, w.Key, w.Value, w.Value == nil)
				}
			}
		})
	}
}

// fetchNDJSON appends batches to a partition log and answers an ndjson
// fetch of it from offset 0, as the leader does.
func fetchNDJSON(t *testing.T, a *Agent, batches ...[]byte) []byte {
	t.Helper()
	opts := a.logOptions()
	opts.Logger = hclog.NewNullLogger()
	log, err := segstore.Open(segstore.OSFS{}, filepath.Join(t.TempDir(), "p0"), opts)
	if err != nil {
		t.Fatal(err)
	}
	defer log.Close()
	for _, b := range batches {
		if _, _, err := log.AppendLeader(b, 1); err != nil {
			t.Fatal(err)
		}
	}
	region, err := log.Read(0, 1<<20, log.LogEndOffset())
	if err != nil {
		t.Fatal(err)
	}
	var ctx fasthttp.RequestCtx
	if err := a.writeNDJSON(&ctx, region, 0, 1<<20); err != nil {
		t.Fatal(err)
	}
	return bytes.Clone(ctx.Response.Body())
}

// TestNDJSONRepeatedHeaderKeepsLast: a record's repeated header key (a
// Kafka or binary producer may send one) keeps its last value in an ndjson
// fetch, as docs/api.md says. A key whose values were once text and once
// binary came out twice, in headers and in headers_base64.
func TestNDJSONRepeatedHeaderKeepsLast(t *testing.T) {
	a := unitAgent(t)
	bin := []byte{0xff, 0x00}
	for _, tc := range []struct {
		name    string
		headers []record.RecordHeader
		want    string
	}{
		{"text then text", []record.RecordHeader{{Key: "h", Value: []byte("1")}, {Key: "h", Value: []byte("2")}}, `"headers":{"h":"2"}`},
		{"text then binary", []record.RecordHeader{{Key: "h", Value: []byte("1")}, {Key: "h", Value: bin}}, `"headers_base64":{"h":"/wA="}`},
		{"binary then text", []record.RecordHeader{{Key: "h", Value: bin}, {Key: "h", Value: []byte("2")}}, `"headers":{"h":"2"}`},
		{"binary then null", []record.RecordHeader{{Key: "h", Value: bin}, {Key: "h", Value: nil}}, `"headers":{"h":null}`},
		{"null then binary", []record.RecordHeader{{Key: "h", Value: nil}, {Key: "h", Value: bin}}, `"headers_base64":{"h":"/wA="}`},
		{"others kept", []record.RecordHeader{{Key: "a", Value: bin}, {Key: "h", Value: bin}, {Key: "b", Value: []byte("x")}, {Key: "h", Value: []byte("2")}},
			`"headers":{"b":"x","h":"2"},"headers_base64":{"a":"/wA="}`},
		// A key that is not UTF-8 (a binary batch may have one) has U+FFFD
		// in place of each bad byte, as docs/api.md says: two such keys are
		// one key repeated. They came out as one name twice, the last
		// value first: {"\ufffd":"2","\ufffd":"1"}.
		{"keys not UTF-8", []record.RecordHeader{{Key: "\xff", Value: []byte("1")}, {Key: "\xfe", Value: []byte("2")}}, "\"headers\":{\"\ufffd\":\"2\"}"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b record.Builder
			if err := b.Add(1, nil, []byte("v"), tc.headers); err != nil {
				t.Fatal(err)
			}
			batch, err := b.AppendTo(nil)
			if err != nil {
				t.Fatal(err)
			}
			want := `{"offset":0,"timestamp":1,"value":"v",` + tc.want + "}\n"
			if got := fetchNDJSON(t, a, batch); string(got) != want {
				t.Errorf("ndjson line:\n%s\nwant:\n%s", got, want)
			}
		})
	}
}

// TestJSONHeadersRoundTrip: the headers of every record a JSON produce
// body is accepted with come back unchanged from an ndjson fetch (the
// body's headers object and the line's, compared as JSON), null values
// included; what could not (repeated names, strings that are not UTF-8)
// is refused on produce (TestJSONProduceRefusesWhatJSONWouldChange).
func TestJSONHeadersRoundTrip(t *testing.T) {
	a := unitAgent(t)
	a.cfg.Limits.MaxRecordBytes = 0
	a.recordLimits.MaxRecordBytes = 0
	headers := []string{
		`{"source":"web","trace":"a1"}`,
		`{"n":null,"e":""}`,
		`{"t\u00e9\ud83d\ude00\t\"\\\/":"\ufffd\n\u0000"}`,
		`{"clé":"välue 😀","":"empty name"}`,
	}
	var recs []string
	for _, h := range headers {
		recs = append(recs, `{"value":"v","headers":`+h+`}`)
	}
	body := []byte(`{"records":[` + strings.Join(recs, ",") + `]}`)
	batch, _, _, err := a.decodeProduceBody([]byte(wire.ContentTypeJSON), body, nil, false)
	if err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(bytes.NewReader(fetchNDJSON(t, a, batch)))
	i := 0
	for ; sc.Scan(); i++ {
		var line struct {
			Headers       map[string]*string `json:"headers"`
			HeadersBase64 map[string]string  `json:"headers_base64"`
		}
		if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
			t.Fatal(err)
		}
		var sent map[string]*string
		if err := json.Unmarshal([]byte(headers[i]), &sent); err != nil {
			t.Fatal(err)
		}
		if len(line.HeadersBase64) > 0 || len(line.Headers) != len(sent) {
			t.Errorf("record %d: sent %s, fetched %s", i, headers[i], sc.Bytes())
			continue
		}
		for k, v := range sent {
			got, ok := line.Headers[k]
			if !ok || (v == nil) != (got == nil) || (v != nil && *v != *got) {
				t.Errorf("record %d: header %q: sent %s, fetched %s", i, k, headers[i], sc.Bytes())
			}
		}
	}
	if i != len(headers) {
		t.Fatalf("%d lines, want %d", i, len(headers))
	}
}

// TestNDJSONServesRecordsOverTodaysLimit: limits.max_record_bytes bounds
// what a client may send, not what the log holds; a record written before
// an operator lowered it (unitAgent's limit is 100 bytes) is still served.
// The ndjson fetch decoded the log with the produce path's limits and
// failed on it, at every fetch of that offset.
func TestNDJSONServesRecordsOverTodaysLimit(t *testing.T) {
	a := unitAgent(t)
	var b record.Builder
	value := strings.Repeat("v", 300)
	if err := b.Add(1, nil, []byte(value), nil); err != nil {
		t.Fatal(err)
	}
	batch, err := b.AppendTo(nil)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"offset":0,"timestamp":1,"value":"` + value + "\"}\n"
	if got := string(fetchNDJSON(t, a, batch)); got != want {
		t.Fatalf("ndjson fetch of a 300-byte record under a 100-byte limit: %q, want %q", got, want)
	}
}
