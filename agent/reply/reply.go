package reply

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"

	"github.com/valyala/fasthttp"

	"github.com/logagent/logagent/agent/partition"
	"github.com/logagent/logagent/segstore"

	"github.com/logagent/logagent/wire"
)

// APIError is the error object of every error response. The optional
// fields belong to the codes named in the comment on the codes.
type APIError struct {
	Code           string `json:"code"`
	Message        string `json:"message"`
	Retriable      bool   `json:"retriable"`
	Leader         string `json:"leader,omitempty"`
	LeaderAddress  string `json:"leader_address,omitempty"`
	LogStartOffset *int64 `json:"log_start_offset,omitempty"`
	HighWatermark  *int64 `json:"high_watermark,omitempty"`
	LogEndOffset   *int64 `json:"log_end_offset,omitempty"`

	// Status is the HTTP status of the answer, not part of the object.
	Status int `json:"-"`
}

func (e *APIError) Error() string { return e.Code + ": " + e.Message }

// WireCode is the API's error code, which the Kafka listener maps to
// Kafka's (kafka.ErrorCode).
func (e *APIError) WireCode() string { return e.Code }

// NewAPIError is an error answer without the optional fields.
func NewAPIError(status int, code, message string, retriable bool) *APIError {
	return &APIError{Status: status, Code: code, Message: message, Retriable: retriable}
}

// WriteError answers with a new APIError.
func WriteError(ctx *fasthttp.RequestCtx, status int, code, message string, retriable bool) {
	WriteAPIError(ctx, NewAPIError(status, code, message, retriable))
}

// errorCodeKey is the user value under which WriteAPIError leaves the
// code it answered with, for the router that counts error answers (Code).
type errorCodeKey struct{}

// WriteAPIError answers with e; a retriable 503 carries Retry-After.
func WriteAPIError(ctx *fasthttp.RequestCtx, e *APIError) {
	body, _ := json.Marshal(struct {
		Error *APIError `json:"error"`
	}{e})
	ctx.SetUserValue(errorCodeKey{}, e.Code)
	ctx.Response.Reset()
	ctx.SetStatusCode(e.Status)
	ctx.SetContentType(wire.ContentTypeJSON)
	if e.Retriable && e.Status == fasthttp.StatusServiceUnavailable {
		ctx.Response.Header.Set("Retry-After", strconv.Itoa(1))
	}
	ctx.SetBody(append(body, '\n'))
}

// Code is the code of the error answer WriteAPIError wrote in ctx, if it
// wrote one.
func Code(ctx *fasthttp.RequestCtx) (string, bool) {
	code, ok := ctx.UserValue(errorCodeKey{}).(string)
	return code, ok
}

// WriteJSON answers with v as a JSON body.
func WriteJSON(ctx *fasthttp.RequestCtx, status int, v any) {
	body, err := json.Marshal(v)
	if err != nil {
		WriteError(ctx, fasthttp.StatusInternalServerError, wire.CodeInternal, err.Error(), false)
		return
	}
	ctx.SetStatusCode(status)
	ctx.SetContentType(wire.ContentTypeJSON)
	ctx.SetBody(append(body, '\n'))
}

// SendRegion makes a log region the response body with its exact size, so
// fasthttp sends it with sendfile(2) and closes it (returning its
// descriptor) when done.
func SendRegion(ctx *fasthttp.RequestCtx, region *segstore.Region) {
	if region.Len == 0 {
		region.Close()
		return
	}
	ctx.SetBodyStream(region, int(region.Len))
}

// StorageError maps a segstore error of a read.
func StorageError(err error) *APIError {
	var oor *segstore.OffsetOutOfRangeError
	switch {
	case errors.As(err, &oor):
		e := NewAPIError(fasthttp.StatusRequestedRangeNotSatisfiable, wire.CodeOffsetOutOfRange, err.Error(), false)
		e.LogStartOffset, e.LogEndOffset = &oor.LogStartOffset, &oor.LogEndOffset
		return e
	case errors.Is(err, segstore.ErrClosed), errors.Is(err, segstore.ErrFailed), errors.Is(err, partition.ErrReplicaStopped):
		return NewAPIError(fasthttp.StatusServiceUnavailable, wire.CodeStorageError, err.Error(), true)
	default:
		return NewAPIError(fasthttp.StatusInternalServerError, wire.CodeStorageError, err.Error(), false)
	}
}

// UnknownTopic is the answer to a request for a topic the metadata does
// not have.
func UnknownTopic(name string) *APIError {
	return NewAPIError(fasthttp.StatusNotFound, wire.CodeUnknownTopic, "no topic "+strconv.Quote(name), false)
}

// InvalidTopicName is the answer to a topic name election.ValidTopicName
// refuses.
func InvalidTopicName(name string) *APIError {
	return NewAPIError(fasthttp.StatusBadRequest, wire.CodeInvalidTopicName,
		fmt.Sprintf("topic name %q must be 1 to 249 of [a-zA-Z0-9._-], and not . or ..", name), false)
}

// PartitionName is a partition as the answers name it: topic/partition.
func PartitionName(topic string, partition int) string {
	return topic + "/" + strconv.Itoa(partition)
}

// DecodeOneObject decodes a request body that must be exactly one JSON
// object of v's type: a field v does not have is refused, so that a
// misspelt setting ("replicationFactor") never quietly becomes a default,
// and so is any other value (null, an array) and anything after the
// object, a stray ']' or '}' included. Every JSON body of the client API is
// read with it.
func DecodeOneObject(body []byte, v any) error {
	if start := bytes.TrimLeft(body, " \t\r\n"); len(start) == 0 || start[0] != '{' {
		return errors.New("the body is not a JSON object")
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	return expectEnd(dec)
}

// expectEnd refuses anything but white space after the value dec read.
// (Decoder.More says false before a ']' or '}' it has not read.)
func expectEnd(dec *json.Decoder) error {
	if _, err := dec.Token(); err != io.EOF {
		return errors.New("data after the JSON value")
	}
	return nil
}

// DecodeArrayField decodes a request body that must be exactly one JSON
// object whose only field is field, an array, and hands each element to
// each as it is decoded, with DecodeOneObject's rules (unknown fields
// refused, in the object and in each element, and nothing after it). An
// array read element by element never becomes a slice of them all: a
// produce body within limits.max_request_bytes may hold millions of
// records ({} is two bytes). A null or absent array has no elements. An
// error of each is returned unchanged; others say where the body went
// wrong.
func DecodeArrayField[T any](body []byte, field string, each func(i int, elem *T) error) error {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := expectDelim(dec, '{'); err != nil {
		return errors.New("the body is not a JSON object")
	}
	seen := false
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		if name, _ := tok.(string); name != field {
			return fmt.Errorf("json: unknown field %q", tok)
		}
		if seen {
			return fmt.Errorf("json: field %q given twice", field)
		}
		seen = true
		if err := decodeArray(dec, field, each); err != nil {
			return err
		}
	}
	if err := expectDelim(dec, '}'); err != nil {
		return err
	}
	return expectEnd(dec)
}

func decodeArray[T any](dec *json.Decoder, field string, each func(i int, elem *T) error) error {
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	if tok == nil {
		return nil
	}
	if d, ok := tok.(json.Delim); !ok || d != '[' {
		return fmt.Errorf("json: field %q is not an array", field)
	}
	for i := 0; dec.More(); i++ {
		var elem T
		if err := dec.Decode(&elem); err != nil {
			return fmt.Errorf("%s[%d]: %w", field, i, err)
		}
		if err := each(i, &elem); err != nil {
			return err
		}
	}
	return expectDelim(dec, ']')
}

func expectDelim(dec *json.Decoder, want json.Delim) error {
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	if d, ok := tok.(json.Delim); !ok || d != want {
		return fmt.Errorf("json: %v where %q was due", tok, want)
	}
	return nil
}

// RelayedError decodes a peer's JSON error, keeping its status and fields.
func RelayedError(resp *fasthttp.Response) *APIError {
	var body struct {
		Error APIError `json:"error"`
	}
	if err := json.Unmarshal(resp.Body(), &body); err != nil || body.Error.Code == "" {
		return NewAPIError(fasthttp.StatusBadGateway, wire.CodeInternal,
			fmt.Sprintf("leader answered %d with %q", resp.StatusCode(), Truncate(resp.Body(), 200)), false)
	}
	e := body.Error
	e.Status = resp.StatusCode()
	return &e
}

// Truncate is b cut to n bytes, for quoting a body in an error message.
func Truncate(b []byte, n int) []byte {
	if len(b) > n {
		return b[:n]
	}
	return b
}
