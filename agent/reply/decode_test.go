package reply

import (
	"errors"
	"strings"
	"testing"
)

// TestDecodeOneObject: a body is one JSON object and nothing else. A stray
// ']' or '}' after it passed (json.Decoder.More says false before them),
// and so did null, which POST /v1/producers answered 201 with a new id.
func TestDecodeOneObject(t *testing.T) {
	type target struct {
		Name string `json:"name"`
	}
	for _, tc := range []struct {
		body string
		ok   bool
	}{
		{body: `{"name":"orders"}`, ok: true},
		{body: " \n{\"name\":\"orders\"}\n ", ok: true},
		{body: `{}`, ok: true},
		{body: `{"name":"orders"}]`},
		{body: `{"name":"orders"}}`},
		{body: `{"name":"orders"}]]]}`},
		{body: `{"name":"orders"} {}`},
		{body: `{"name":"orders"} x`},
		{body: `null`},
		{body: `[{"name":"orders"}]`},
		{body: `"orders"`},
		{body: ``},
		{body: `{"nmae":"orders"}`},
	} {
		var v target
		err := DecodeOneObject([]byte(tc.body), &v)
		if (err == nil) != tc.ok {
			t.Errorf("DecodeOneObject(%q) = %v, want ok %t", tc.body, err, tc.ok)
		}
	}
}

// TestDecodeArrayField: the elements of the one field are handed over one
// by one, with DecodeOneObject's rules for the rest of the body.
func TestDecodeArrayField(t *testing.T) {
	type elem struct {
		V string `json:"v"`
	}
	errStop := errors.New("stop")
	for _, tc := range []struct {
		name    string
		body    string
		stopAt  int // each returns errStop at this index (-1: never)
		want    []string
		wantErr string // "" when it succeeds
	}{
		{name: "elements in order", body: `{"records":[{"v":"a"},{"v":"b"},{}]}`, stopAt: -1, want: []string{"a", "b", ""}},
		{name: "empty array", body: `{"records":[]}`, stopAt: -1},
		{name: "null array", body: `{"records":null}`, stopAt: -1},
		{name: "no field", body: ` {} `, stopAt: -1},
		{name: "an error of each is returned as it is", body: `{"records":[{"v":"a"},{"v":"b"}]}`, stopAt: 1, want: []string{"a"}, wantErr: "stop"},
		{name: "unknown field in the object", body: `{"records":[],"x":1}`, stopAt: -1, wantErr: `unknown field "x"`},
		{name: "unknown field in an element", body: `{"records":[{"v":"a","w":1}]}`, stopAt: -1, wantErr: `records[0]: json: unknown field "w"`},
		{name: "field twice", body: `{"records":[{"v":"a"}],"records":[{"v":"b"}]}`, stopAt: -1, want: []string{"a"}, wantErr: "given twice"},
		{name: "not an array", body: `{"records":{"v":"a"}}`, stopAt: -1, wantErr: "not an array"},
		{name: "trailing bracket", body: `{"records":[{"v":"a"}]}]`, stopAt: -1, want: []string{"a"}, wantErr: "data after the JSON value"},
		{name: "second value", body: `{"records":[]} {}`, stopAt: -1, wantErr: "data after the JSON value"},
		{name: "not an object", body: `[{"v":"a"}]`, stopAt: -1, wantErr: "not a JSON object"},
		{name: "null", body: `null`, stopAt: -1, wantErr: "not a JSON object"},
		{name: "cut short", body: `{"records":[{"v":"a"}`, stopAt: -1, want: []string{"a"}, wantErr: "EOF"},
		{name: "element of the wrong type", body: `{"records":[1]}`, stopAt: -1, wantErr: "records[0]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			err := DecodeArrayField([]byte(tc.body), "records", func(i int, e *elem) error {
				if i == tc.stopAt {
					return errStop
				}
				got = append(got, e.V)
				return nil
			})
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("error %v", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("error %v, want one saying %q", err, tc.wantErr)
			case tc.wantErr == "stop" && !errors.Is(err, errStop):
				t.Fatalf("error %v is not the one each returned", err)
			}
			if strings.Join(got, ",") != strings.Join(tc.want, ",") {
				t.Fatalf("elements %q, want %q", got, tc.want)
			}
		})
	}
}
