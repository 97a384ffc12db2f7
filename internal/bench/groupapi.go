package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/logagent/logagent/client"
)

// errConnection reports a request to the agent that got no HTTP answer.
var errConnection = errors.New("bench: no answer from the agent")

// groupAPI speaks the consumer-group endpoints of one agent's client API
// as plain HTTP/JSON (docs/api.md "Consumer groups"), so the benchmark
// measures the API itself and not a client library's choices.
type groupAPI struct {
	base string // http://host:port, no trailing slash
	hc   *http.Client
}

// gpart names a partition in requests and answers.
type gpart struct {
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
}

// memberAnswer answers a join or a heartbeat.
type memberAnswer struct {
	MemberID            string  `json:"member_id"`
	MemberEpoch         int32   `json:"member_epoch"`
	Assigned            []gpart `json:"assigned"`
	Revoke              []gpart `json:"revoke"`
	HeartbeatIntervalMS int64   `json:"heartbeat_interval_ms"`
}

type joinBody struct {
	Topics           []string `json:"topics"`
	SessionTimeoutMS int64    `json:"session_timeout_ms"`
}

type heartbeatBody struct {
	MemberEpoch int32   `json:"member_epoch"`
	Owned       []gpart `json:"owned"`
	WaitMS      int64   `json:"wait_ms"`
}

type committedOffsets struct {
	Offsets []struct {
		Topic     string `json:"topic"`
		Partition int32  `json:"partition"`
		Offset    int64  `json:"offset"`
	} `json:"offsets"`
}

type groupDescription struct {
	Coordinator string `json:"coordinator"`
}

func newGroupAPI(addr string, hc *http.Client) (*groupAPI, error) {
	if !strings.Contains(addr, "://") {
		addr = "http://" + addr
	}
	u, err := url.Parse(addr)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return nil, fmt.Errorf("%w: agent address %q: want http://host:port", ErrInvalidConfig, addr)
	}
	return &groupAPI{base: strings.TrimSuffix(u.String(), "/"), hc: hc}, nil
}

func (a *groupAPI) groupPath(group string, rest ...string) string {
	p := a.base + "/v1/groups/" + url.PathEscape(group)
	for _, r := range rest {
		p += "/" + r
	}
	return p
}

// do sends one request and decodes a 200 answer into out (nil: the body
// is read and dropped). Any other status is a *client.Error carrying the
// agent's error code, so that ErrorKind counts failures by code.
func (a *groupAPI) do(ctx context.Context, method, u, contentType string, body []byte, out any) error {
	req, err := http.NewRequestWithContext(ctx, method, u, bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("bench: %s %s: %w", method, u, err)
	}
	if body != nil {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := a.hc.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("%w: %s %s: %v", errConnection, method, u, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return apiError(resp)
	}
	if out == nil {
		_, err = io.Copy(io.Discard, resp.Body)
	} else {
		err = json.NewDecoder(resp.Body).Decode(out)
	}
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("%w: %s %s: answer: %v", client.ErrProtocol, method, u, err)
	}
	return nil
}

// apiError turns an error answer into a *client.Error.
func apiError(resp *http.Response) error {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	var e struct {
		Error struct {
			Code      string `json:"code"`
			Message   string `json:"message"`
			Retriable bool   `json:"retriable"`
		} `json:"error"`
	}
	ce := &client.Error{Status: resp.StatusCode, Message: strings.TrimSpace(string(b)), LogStartOffset: -1, HighWatermark: -1}
	if json.Unmarshal(b, &e) == nil && e.Error.Code != "" {
		ce.Code, ce.Message, ce.Retriable = e.Error.Code, e.Error.Message, e.Error.Retriable
	}
	return ce
}

func (a *groupAPI) postJSON(ctx context.Context, u string, v, out any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("bench: encode: %w", err)
	}
	return a.do(ctx, http.MethodPost, u, "application/json", b, out)
}

func (a *groupAPI) join(ctx context.Context, group string, topics []string, sessionMS int64) (memberAnswer, error) {
	var ans memberAnswer
	err := a.postJSON(ctx, a.groupPath(group, "members"), joinBody{Topics: topics, SessionTimeoutMS: sessionMS}, &ans)
	return ans, err
}

func (a *groupAPI) heartbeat(ctx context.Context, group, member string, epoch int32, owned []gpart, waitMS int64) (memberAnswer, error) {
	if owned == nil {
		owned = []gpart{}
	}
	var ans memberAnswer
	err := a.postJSON(ctx, a.groupPath(group, "members", url.PathEscape(member), "heartbeat"),
		heartbeatBody{MemberEpoch: epoch, Owned: owned, WaitMS: waitMS}, &ans)
	return ans, err
}

func (a *groupAPI) leave(ctx context.Context, group, member string) error {
	return a.do(ctx, http.MethodDelete, a.groupPath(group, "members", url.PathEscape(member)), "", nil, nil)
}

// commit sends a prepared commit body (see appendCommitBody).
func (a *groupAPI) commit(ctx context.Context, group string, body []byte) error {
	return a.do(ctx, http.MethodPost, a.groupPath(group, "offsets"), "application/json", body, nil)
}

func (a *groupAPI) offsets(ctx context.Context, group string) (committedOffsets, error) {
	var out committedOffsets
	err := a.do(ctx, http.MethodGet, a.groupPath(group, "offsets"), "", nil, &out)
	return out, err
}

func (a *groupAPI) describe(ctx context.Context, group string) (groupDescription, error) {
	var out groupDescription
	err := a.do(ctx, http.MethodGet, a.groupPath(group), "", nil, &out)
	return out, err
}

// produce appends body to one partition with acks=all: one record
// (application/octet-stream) or one per line (text/plain).
func (a *groupAPI) produce(ctx context.Context, topic string, partition int, contentType string, body []byte) error {
	u := a.base + "/v1/topics/" + url.PathEscape(topic) + "/records?acks=all&partition=" + strconv.Itoa(partition)
	return a.do(ctx, http.MethodPost, u, contentType, body, nil)
}

// clientAddress returns the client API of node, from the agent's status.
func (a *groupAPI) clientAddress(ctx context.Context, node string) (string, error) {
	var st struct {
		Agents []struct {
			NodeID        string `json:"node_id"`
			ClientAddress string `json:"client_address"`
		} `json:"agents"`
	}
	if err := a.do(ctx, http.MethodGet, a.base+"/v1/status", "", nil, &st); err != nil {
		return "", err
	}
	for _, ag := range st.Agents {
		if ag.NodeID == node {
			return ag.ClientAddress, nil
		}
	}
	return "", fmt.Errorf("bench: agent %q is not in %s/v1/status", node, a.base)
}

// appendCommitBody appends a commit request of the given offsets of one
// topic, built by hand so that the load generator spends little CPU per
// request. memberJSON and topicJSON are the member id and the topic as
// JSON strings.
func appendCommitBody(b, memberJSON []byte, epoch int32, topicJSON []byte, partitions []int32, offset int64) []byte {
	b = append(b, `{"member_id":`...)
	b = append(b, memberJSON...)
	b = append(b, `,"member_epoch":`...)
	b = strconv.AppendInt(b, int64(epoch), 10)
	b = append(b, `,"offsets":[`...)
	for i, p := range partitions {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"topic":`...)
		b = append(b, topicJSON...)
		b = append(b, `,"partition":`...)
		b = strconv.AppendInt(b, int64(p), 10)
		b = append(b, `,"offset":`...)
		b = strconv.AppendInt(b, offset, 10)
		b = append(b, '}')
	}
	return append(b, "]}"...)
}
