package jsonrecord

import (
	"errors"
	"fmt"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/logagent/logagent/record"
)

// Record is one record of an application/json produce body, as its
// sender wrote it (docs/api.md): key and value as text or base64 (nil when
// absent), headers in the body's order, a nil value for a null one.
type Record struct {
	Key, KeyBase64, Value, ValueBase64 *string
	Headers                            []record.RecordHeader
}

// Parse reads one record of an application/json produce body, given as
// the record's JSON text, which the body's decoder has already checked is
// one well-formed JSON value.
//
// It reads the record itself rather than with encoding/json, which takes
// what it cannot represent with a result the sender does not see:
//
//   - a name given twice, in the record or in its headers: json keeps the
//     last value, and a header value the client sent is lost (Kafka allows
//     repeated header keys; a JSON object holds one value per name, so a
//     record with them is sent as a binary batch);
//   - a field name in another case ("Value", "VALUE"): json matches names
//     without case, so {"value":"a","VALUE":"b"} wrote "b";
//   - a string that is not UTF-8 (raw bytes, or an escaped lone surrogate
//     such as \ud800): json puts U+FFFD in their place, another key or
//     value than the client's;
//   - a null header value: json made it an empty one.
//
// The first three are refused; a null header value is a null header (as
// the ndjson fetch renders it). A record that is not an object (null) is
// refused too: it was an empty record.
func Parse(raw []byte) (Record, error) {
	var r Record
	if i := invalidUTF8At(raw); i >= 0 {
		return r, fmt.Errorf("byte %d of the record is not UTF-8: JSON text is UTF-8 (bytes go in key_base64 or value_base64)", i)
	}
	s := jsonScanner{b: raw}
	if !s.consume('{') {
		return r, errors.New("a record is a JSON object")
	}
	seen := map[string]bool{}
	for !s.consume('}') {
		s.consume(',')
		name, err := s.str()
		if err != nil {
			return r, err
		}
		if seen[name] {
			return r, fmt.Errorf("field %q given twice", name)
		}
		seen[name] = true
		s.consume(':')
		switch name {
		case "key", "key_base64", "value", "value_base64":
			v, err := s.nullableStr(name)
			if err != nil {
				return r, err
			}
			switch name {
			case "key":
				r.Key = v
			case "key_base64":
				r.KeyBase64 = v
			case "value":
				r.Value = v
			case "value_base64":
				r.ValueBase64 = v
			}
		case "headers":
			if r.Headers, err = s.headers(); err != nil {
				return r, err
			}
		default:
			return r, fmt.Errorf("unknown field %q (the fields are key, key_base64, value, value_base64, headers)", name)
		}
	}
	return r, nil
}

// invalidUTF8At is the index of the first byte of b that is not part of
// valid UTF-8, -1 when there is none.
func invalidUTF8At(b []byte) int {
	if utf8.Valid(b) {
		return -1
	}
	for i := 0; i < len(b); {
		r, n := utf8.DecodeRune(b[i:])
		if r == utf8.RuneError && n <= 1 {
			return i
		}
		i += n
	}
	return -1
}

// jsonScanner reads a JSON text already known to be well formed and UTF-8.
type jsonScanner struct {
	b []byte
	i int
}

func (s *jsonScanner) skipSpace() {
	for s.i < len(s.b) && (s.b[s.i] == ' ' || s.b[s.i] == '\t' || s.b[s.i] == '\n' || s.b[s.i] == '\r') {
		s.i++
	}
}

// consume skips white space, then c if it comes next.
func (s *jsonScanner) consume(c byte) bool {
	s.skipSpace()
	if s.i < len(s.b) && s.b[s.i] == c {
		s.i++
		return true
	}
	return false
}

// nullableStr reads the value of field name: a string, or null (nil).
func (s *jsonScanner) nullableStr(name string) (*string, error) {
	if s.null() {
		return nil, nil
	}
	v, err := s.str()
	if err != nil {
		return nil, fmt.Errorf("field %s: %w", name, err)
	}
	return &v, nil
}

// null reads a null if one comes next.
func (s *jsonScanner) null() bool {
	s.skipSpace()
	if s.i+4 <= len(s.b) && string(s.b[s.i:s.i+4]) == "null" {
		s.i += 4
		return true
	}
	return false
}

// headers reads the headers field: null, or an object of string or null
// values whose names are all different.
func (s *jsonScanner) headers() ([]record.RecordHeader, error) {
	if s.null() {
		return nil, nil
	}
	if !s.consume('{') {
		return nil, errors.New("headers is an object of header names and text values")
	}
	var out []record.RecordHeader
	seen := map[string]bool{}
	for !s.consume('}') {
		s.consume(',')
		name, err := s.str()
		if err != nil {
			return nil, fmt.Errorf("headers: %w", err)
		}
		if seen[name] {
			return nil, fmt.Errorf("header %q given twice: a JSON object holds one value per name (send a record with repeated header keys in a binary batch)", name)
		}
		seen[name] = true
		s.consume(':')
		v, err := s.nullableStr("header " + strconv.Quote(name))
		if err != nil {
			return nil, err
		}
		h := record.RecordHeader{Key: name}
		if v != nil {
			h.Value = []byte(*v)
			if h.Value == nil {
				h.Value = []byte{}
			}
		}
		out = append(out, h)
	}
	return out, nil
}

// str reads a string, refusing an escaped surrogate that is not half of a
// pair: it stands for no character, and json made it U+FFFD.
func (s *jsonScanner) str() (string, error) {
	if !s.consume('"') {
		return "", errors.New("a string or null was due")
	}
	start := s.i
	var out []byte
	for {
		c := s.b[s.i]
		switch {
		case c == '"':
			if out == nil {
				out = s.b[start:s.i]
			}
			s.i++
			return string(out), nil
		case c != '\\':
			if out != nil {
				out = append(out, c)
			}
			s.i++
			continue
		}
		if out == nil {
			out = append([]byte{}, s.b[start:s.i]...)
		}
		esc := s.b[s.i+1]
		s.i += 2
		switch esc {
		case 'b':
			out = append(out, '\b')
		case 'f':
			out = append(out, '\f')
		case 'n':
			out = append(out, '\n')
		case 'r':
			out = append(out, '\r')
		case 't':
			out = append(out, '\t')
		case 'u':
			r := s.hex4(s.i)
			s.i += 4
			if utf16.IsSurrogate(r) {
				var low rune = -1
				if r < 0xdc00 && s.i+6 <= len(s.b) && s.b[s.i] == '\\' && s.b[s.i+1] == 'u' {
					low = s.hex4(s.i + 2)
				}
				if r = utf16.DecodeRune(r, low); r == utf8.RuneError {
					return "", fmt.Errorf("the escape %s is half of a UTF-16 surrogate pair, no character", s.b[s.i-6:s.i])
				}
				s.i += 6
			}
			out = utf8.AppendRune(out, r)
		default: // '"', '\\', '/'
			out = append(out, esc)
		}
	}
}

// hex4 is the value of the 4 hex digits at b[i:], -1 if they are not.
func (s *jsonScanner) hex4(i int) rune {
	if i+4 > len(s.b) {
		return -1
	}
	v, err := strconv.ParseUint(string(s.b[i:i+4]), 16, 16)
	if err != nil {
		return -1
	}
	return rune(v)
}
