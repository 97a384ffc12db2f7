package agent

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/valyala/fasthttp"

	"github.com/logagent/logagent/agent/partition"
	"github.com/logagent/logagent/agent/reply"
	"github.com/logagent/logagent/config"
	"github.com/logagent/logagent/record"
	"github.com/logagent/logagent/replicate"
	"github.com/logagent/logagent/segstore"

	"github.com/logagent/logagent/wire"
)

// unitAgent is an Agent for handler-level tests that need no Consul.
func unitAgent(t testing.TB) *Agent {
	t.Helper()
	cfg, err := config.Load()
	if err != nil {
		t.Fatal(err)
	}
	cfg.Limits.MaxRecordBytes = 100
	a := New(cfg, hclog.NewNullLogger(), nil)
	a.now = func() time.Time { return time.UnixMilli(1_700_000_000_000) }
	return a
}

func records(t *testing.T, batch []byte) (keys, values []string, timestamps []int64) {
	t.Helper()
	it, err := record.NewDecoder(record.Limits{}).Records(batch)
	if err != nil {
		t.Fatal(err)
	}
	for it.Next() {
		r := it.Record()
		keys = append(keys, string(r.Key))
		values = append(values, string(r.Value))
		timestamps = append(timestamps, r.Timestamp)
	}
	if err := it.Err(); err != nil {
		t.Fatal(err)
	}
	return keys, values, timestamps
}

func TestDecodeProduceBody(t *testing.T) {
	a := unitAgent(t)
	var b record.Builder
	if err := b.Add(1, []byte("k"), []byte("binary"), nil); err != nil {
		t.Fatal(err)
	}
	good, _ := b.AppendTo(nil)
	corrupt := bytes.Clone(good)
	corrupt[len(corrupt)-1] ^= 1
	b.Reset()
	b.SetProducer(7, 0, 0)
	_ = b.Add(1, nil, []byte("x"), nil)
	idempotent, _ := b.AppendTo(nil)
	// Kafka's transactional bit (attributes bit 4), with a CRC that covers it.
	transactional := bytes.Clone(idempotent)
	transactional[22] |= 0x10
	binary.BigEndian.PutUint32(transactional[17:], record.Checksum(transactional))
	b.Reset()
	_ = b.Add(1, nil, bytes.Repeat([]byte("v"), 200), nil)
	bigRecord, _ := b.AppendTo(nil)

	tests := []struct {
		name        string
		contentType string
		body        []byte
		key         []byte
		values      []string
		code        string
	}{
		{"ndjson", "application/x-ndjson", []byte("a\nbb\n\nccc"), nil, []string{"a", "bb", "ccc"}, ""},
		{"ndjson crlf and key", "application/x-ndjson; charset=utf-8", []byte("{\"x\":1}\r\n{\"x\":2}\r\n"), []byte("k1"), []string{`{"x":1}`, `{"x":2}`}, ""},
		{"text", "text/plain", []byte("one line"), nil, []string{"one line"}, ""},
		{"ndjson empty", "application/x-ndjson", []byte("\n\n"), nil, nil, wire.CodeInvalidRequest},
		{"ndjson value too large", "application/x-ndjson", bytes.Repeat([]byte("x"), 101), nil, nil, wire.CodeRecordTooLarge},
		{"batch", wire.ContentTypeBatch, good, nil, []string{"binary"}, ""},
		{"batch corrupt", wire.ContentTypeBatch, corrupt, nil, nil, wire.CodeCorruptBatch},
		{"batch truncated", wire.ContentTypeBatch, good[:30], nil, nil, wire.CodeCorruptBatch},
		{"batch idempotent", wire.ContentTypeBatch, idempotent, nil, []string{"x"}, ""},
		{"batch transactional", wire.ContentTypeBatch, transactional, nil, nil, wire.CodeUnsupportedBatch},
		{"batch record too large", wire.ContentTypeBatch, bigRecord, nil, nil, wire.CodeRecordTooLarge},
		{"json", "application/json", []byte(`{"records":[{"key":"k1","value":"v1","headers":{"b":"2","a":"1"}},{"value_base64":"/wA="},{}]}`), []byte("kp"), []string{"v1", "\xff\x00", ""}, ""},
		{"json empty", "application/json", []byte(`{"records":[]}`), nil, nil, wire.CodeInvalidRequest},
		{"json malformed", "application/json", []byte(`{"records":[{"value":"x"}`), nil, nil, wire.CodeInvalidRequest},
		{"json unknown field", "application/json", []byte(`{"records":[{"val":"x"}]}`), nil, nil, wire.CodeInvalidRequest},
		{"json two values", "application/json", []byte(`{"records":[{"value":"x"}]} {}`), nil, nil, wire.CodeInvalidRequest},
		{"json both value forms", "application/json", []byte(`{"records":[{"value":"x","value_base64":"eA=="}]}`), nil, nil, wire.CodeInvalidRequest},
		{"json bad base64", "application/json", []byte(`{"records":[{"value_base64":"!!"}]}`), nil, nil, wire.CodeInvalidRequest},
		{"json record too large", "application/json", []byte(`{"records":[{"value":"` + strings.Repeat("x", 101) + `"}]}`), nil, nil, wire.CodeRecordTooLarge},
		{"octet-stream", "application/octet-stream", []byte("a\nb\x00"), []byte("k"), []string{"a\nb\x00"}, ""},
		{"octet-stream too large", "application/octet-stream", bytes.Repeat([]byte("x"), 101), nil, nil, wire.CodeRecordTooLarge},
		{"no content type", "", []byte("x"), nil, nil, wire.CodeUnsupportedType},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			batch, count, _, err := a.decodeProduceBody([]byte(tc.contentType), tc.body, tc.key, false)
			if tc.code != "" {
				var e *reply.APIError
				if !errors.As(err, &e) || e.Code != tc.code {
					t.Fatalf("error %v, want code %s", err, tc.code)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if count != len(tc.values) {
				t.Fatalf("count %d, want %d", count, len(tc.values))
			}
			keys, values, timestamps := records(t, batch)
			if strings.Join(values, "|") != strings.Join(tc.values, "|") {
				t.Fatalf("values %q, want %q", values, tc.values)
			}
			switch tc.contentType {
			case wire.ContentTypeBatch:
			case "application/json":
				// Each record's own key, else the key parameter.
				if strings.Join(keys, "|") != "k1|kp|kp" {
					t.Fatalf("keys %q", keys)
				}
			default:
				for i, k := range keys {
					if k != string(tc.key) || timestamps[i] != 1_700_000_000_000 {
						t.Fatalf("record %d: key %q, timestamp %d; want %q and the agent clock's", i, k, timestamps[i], tc.key)
					}
				}
			}
			if tc.contentType == wire.ContentTypeBatch && &batch[0] == &tc.body[0] {
				t.Fatal("the batch aliases the request buffer, which fasthttp reuses")
			}
		})
	}
}

func TestParseAcks(t *testing.T) {
	for in, want := range map[string]replicate.Acks{"": replicate.AcksAll, "all": replicate.AcksAll, "-1": replicate.AcksAll, "1": replicate.AcksLeader, "0": replicate.AcksNone} {
		if got, err := parseAcks([]byte(in)); err != nil || got != want {
			t.Errorf("acks=%q: %v %v, want %v", in, got, err, want)
		}
	}
	if _, err := parseAcks([]byte("2")); err == nil {
		t.Error("acks=2 accepted")
	}
}

// TestChoosePartition: the partition parameter names a partition of the
// topic (404 unknown_partition when the topic has no such partition), or
// is refused 400 invalid_request when it is no partition number at all:
// "abc", a negative or overflowing number, and an empty value (taken as
// partition 0) were 404s, or written.
func TestChoosePartition(t *testing.T) {
	a := unitAgent(t)
	args := func(q string) *fasthttp.Args {
		var x fasthttp.Args
		x.Parse(q)
		return &x
	}
	for _, tc := range []struct {
		query  string
		want   int
		status int
		code   string
	}{
		{"partition=2", 2, 200, ""},
		{"partition=0", 0, 200, ""},
		{"partition=3", 0, 404, wire.CodeUnknownPartition},
		{"partition=2147483647", 0, 404, wire.CodeUnknownPartition},
		{"partition=abc", 0, 400, wire.CodeInvalidRequest},
		{"partition=1x", 0, 400, wire.CodeInvalidRequest},
		{"partition=-1", 0, 400, wire.CodeInvalidRequest},
		{"partition=2147483648", 0, 400, wire.CodeInvalidRequest},
		{"partition=99999999999999999999", 0, 400, wire.CodeInvalidRequest},
		{"partition=", 0, 400, wire.CodeInvalidRequest},
		{"partition", 0, 400, wire.CodeInvalidRequest},
	} {
		p, err := a.choosePartition(args(tc.query), nil, 3)
		if tc.code == "" {
			if err != nil || p != tc.want {
				t.Errorf("%s: partition %d, %v; want %d", tc.query, p, err, tc.want)
			}
			continue
		}
		var e *reply.APIError
		if !errors.As(err, &e) || e.Status != tc.status || e.Code != tc.code {
			t.Errorf("%s: partition %d, %v; want %d %s", tc.query, p, err, tc.status, tc.code)
		} else if !strings.Contains(e.Message, "partition") {
			t.Errorf("%s: message %q does not say what is wrong", tc.query, e.Message)
		}
	}
	// FNV-1a 32 of "user-42" is 0x026073ab (39875499), and 39875499 % 7 = 6.
	if p, _ := a.choosePartition(args(""), []byte("user-42"), 7); p != 6 {
		t.Fatalf("key user-42 over 7 partitions: %d, want 6", p)
	}
	seen := map[int]bool{}
	for range 6 {
		p, _ := a.choosePartition(args(""), nil, 3)
		seen[p] = true
	}
	if len(seen) != 3 {
		t.Fatalf("round robin over 3 partitions hit %v", seen)
	}
}

func TestProduceErrorCodes(t *testing.T) {
	a := unitAgent(t)
	a.coord = nil
	tests := []struct {
		out    partition.ProduceOutcome
		status int
		code   string
	}{
		{partition.ProduceOutcome{Err: replicate.ErrNotEnoughReplicas}, 503, wire.CodeNotEnoughReplicas},
		{partition.ProduceOutcome{Err: replicate.ErrNotEnoughReplicasAfterAppend, Appended: true}, 503, wire.CodeNotEnoughReplicasAfterAppend},
		{partition.ProduceOutcome{Err: replicate.ErrAckTimeout, Appended: true}, 504, wire.CodeAckTimeout},
		{partition.ProduceOutcome{Err: &segstore.FailedError{Err: errors.New("eio")}}, 503, wire.CodeStorageError},
		{partition.ProduceOutcome{Err: record.ErrCorrupt}, 400, wire.CodeCorruptBatch},
		{partition.ProduceOutcome{Err: fmt.Errorf("%w: write: %w", segstore.ErrNoSpace, syscall.ENOSPC)}, 507, wire.CodeInsufficientStorage},
		// A log that failed on ENOSPC (an fsync) names the full disk too.
		{partition.ProduceOutcome{Err: &segstore.FailedError{Err: fmt.Errorf("%w: fsync", segstore.ErrNoSpace)}}, 507, wire.CodeInsufficientStorage},
	}
	for _, tc := range tests {
		e := a.produceError("t", 0, tc.out)
		if e.Status != tc.status || e.Code != tc.code {
			t.Errorf("%v: %d %s, want %d %s", tc.out.Err, e.Status, e.Code, tc.status, tc.code)
		}
		if tc.code == wire.CodeInsufficientStorage && (!e.Retriable || !strings.Contains(e.Message, "disk") || !strings.Contains(e.Message, "full")) {
			t.Errorf("%v: %+v, want a retriable error naming the full disk", tc.out.Err, e)
		}
	}
}

func TestAcceptsBatches(t *testing.T) {
	for accept, want := range map[string]bool{
		"": true, "*/*": true, wire.ContentTypeBatch: true, "application/*": true,
		"text/html, " + wire.ContentTypeBatch + ";q=0.9": true,
		"application/x-ndjson":                           false, "text/plain": false,
	} {
		if got := acceptsBatches([]byte(accept)); got != want {
			t.Errorf("Accept %q: %t, want %t", accept, got, want)
		}
	}
}
