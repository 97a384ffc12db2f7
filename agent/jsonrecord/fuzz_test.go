package jsonrecord

import (
	"bytes"
	"encoding/json"
	"testing"
	"unicode/utf8"
)

// jsonRecord is what encoding/json makes of a record: Parse, where it
// accepts one, must agree with it.
type jsonRecord struct {
	Key         *string            `json:"key"`
	KeyBase64   *string            `json:"key_base64"`
	Value       *string            `json:"value"`
	ValueBase64 *string            `json:"value_base64"`
	Headers     map[string]*string `json:"headers"`
}

// FuzzParse: over any well-formed JSON value (what the body's decoder hands
// Parse), Parse returns a record or an error, never a panic, and a record
// it accepts is the one encoding/json reads, with headers in the text's
// order and each name once.
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		`{"key":"k1","value":"v1","headers":{"b":"2","a":"1"}}`,
		`{"value_base64":"/wA=","key_base64":"AAE="}`,
		`{}`,
		`null`,
		`"x"`,
		`{ "key" : null , "headers" : { "h" : null , "e" : "" } }`,
		`{"value":"\u00e9\ud83d\ude00\n\t\"\\\/"}`,
		`{"value":"\ud800"}`,
		`{"value":"\udc00\ud800"}`,
		`{"value":"a","value":"b"}`,
		`{"headers":{"h":"1","h":"2"}}`,
		`{"VALUE":"a"}`,
		`{"value":1}`,
		`{"headers":[]}`,
		"{\"value\":\"\xff\"}",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		if !json.Valid(raw) {
			return
		}
		r, err := Parse(raw)
		if err != nil {
			return
		}
		if !utf8.Valid(raw) {
			t.Fatalf("accepted a record that is not UTF-8: %q", raw)
		}
		var want jsonRecord
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&want); err != nil {
			t.Fatalf("Parse accepted %q, encoding/json refuses it: %v", raw, err)
		}
		for _, f := range []struct {
			name      string
			got, want *string
		}{
			{"key", r.Key, want.Key},
			{"key_base64", r.KeyBase64, want.KeyBase64},
			{"value", r.Value, want.Value},
			{"value_base64", r.ValueBase64, want.ValueBase64},
		} {
			if (f.got == nil) != (f.want == nil) || f.got != nil && *f.got != *f.want {
				t.Fatalf("%q: %s is %v, encoding/json reads %v", raw, f.name, quote(f.got), quote(f.want))
			}
		}
		if len(r.Headers) != len(want.Headers) {
			t.Fatalf("%q: %d headers, encoding/json reads %d", raw, len(r.Headers), len(want.Headers))
		}
		for _, h := range r.Headers {
			w, ok := want.Headers[h.Key]
			if !ok || (h.Value == nil) != (w == nil) || w != nil && string(h.Value) != *w {
				t.Fatalf("%q: header %q is %q, encoding/json reads %v", raw, h.Key, h.Value, quote(w))
			}
		}
	})
}

func quote(s *string) string {
	if s == nil {
		return "null"
	}
	b, _ := json.Marshal(*s)
	return string(b)
}
