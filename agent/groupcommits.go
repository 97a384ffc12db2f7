package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/logagent/logagent/groupcoord"
	"github.com/logagent/logagent/wire"
)

// Commits a sidecar forwards to one coordinator agent travel together:
// while one forward is in flight, the commits that arrive queue, and the
// next forward carries all of them (at most maxForwardedCommits) as one
// peer request, whose answer has one result per commit:
//
//	POST /v1/replica/groups?op=commits
//	{"commits":[{"group":"g","request":{...the client's commit body...}}, ...]}
//	◄── 200 {"results":[{"answer":{"committed":[...]}},
//	                    {"error":{"code":"stale_member_epoch",...},"status":409}, ...]}
//
// The coordinator runs them side by side, so they also share its appends.
// Each result is what the commit alone would have been answered; a failure
// of the whole forward (unreachable, refused) is each commit's, and each
// is retried on its own by runGroupOp.
const maxForwardedCommits = 512

// commitForwarder holds one queue per coordinator address.
type commitForwarder struct {
	mu     sync.Mutex
	queues map[string]*commitQueue
}

type commitQueue struct {
	// turn is held by the one forward in flight (capacity 1).
	turn    chan struct{}
	mu      sync.Mutex
	pending []*forwardedCommit
}

type forwardedCommit struct {
	group string
	body  []byte
	done  chan commitResult
}

type commitResult struct {
	body []byte
	err  *apiError
}

func newCommitForwarder() *commitForwarder {
	return &commitForwarder{queues: map[string]*commitQueue{}}
}

func (f *commitForwarder) queue(addr string) *commitQueue {
	f.mu.Lock()
	defer f.mu.Unlock()
	q := f.queues[addr]
	if q == nil {
		q = &commitQueue{turn: make(chan struct{}, 1)}
		f.queues[addr] = q
	}
	return q
}

// forwardCommit sends one commit to the coordinator at addr, together
// with those that queue meanwhile, and returns its own result.
func (a *Agent) forwardCommit(addr, coordinator, groupID string, body []byte, deadline time.Time) ([]byte, *apiError) {
	q := a.commits.queue(addr)
	fc := &forwardedCommit{group: groupID, body: body, done: make(chan commitResult, 1)}
	q.mu.Lock()
	q.pending = append(q.pending, fc)
	q.mu.Unlock()
	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	for {
		select {
		case r := <-fc.done:
			return r.body, r.err
		case <-timer.C:
			return nil, newAPIError(fasthttp.StatusServiceUnavailable, wire.CodeCoordinatorNotAvailable,
				"the commit was not answered by coordinator "+coordinator+" in time: its outcome is unknown", true)
		case q.turn <- struct{}{}:
			q.mu.Lock()
			n := min(len(q.pending), maxForwardedCommits)
			batch := q.pending[:n:n]
			q.pending = q.pending[n:]
			q.mu.Unlock()
			if len(batch) > 0 {
				a.sendCommits(addr, coordinator, batch, deadline)
			}
			<-q.turn
		}
	}
}

type forwardedCommitJSON struct {
	Group   string          `json:"group"`
	Request json.RawMessage `json:"request"`
}

type commitsRequestJSON struct {
	Commits []forwardedCommitJSON `json:"commits"`
}

type commitResultJSON struct {
	Answer json.RawMessage `json:"answer,omitempty"`
	Status int             `json:"status,omitempty"`
	Error  *apiError       `json:"error,omitempty"`
}

type commitsAnswerJSON struct {
	Results []commitResultJSON `json:"results"`
}

// sendCommits forwards a batch and answers each of its commits.
func (a *Agent) sendCommits(addr, coordinator string, batch []*forwardedCommit, deadline time.Time) {
	fail := func(e *apiError) {
		for _, fc := range batch {
			fc.done <- commitResult{err: e}
		}
	}
	in := commitsRequestJSON{Commits: make([]forwardedCommitJSON, len(batch))}
	for i, fc := range batch {
		in.Commits[i] = forwardedCommitJSON{Group: fc.group, Request: fc.body}
	}
	// The bodies were decoded by handleGroupOp: they are JSON.
	body, err := json.Marshal(in)
	if err != nil {
		fail(newAPIError(fasthttp.StatusInternalServerError, wire.CodeInternal, err.Error(), false))
		return
	}
	req := a.groupPeers.NewRequest(addr, peerGroupsPath)
	defer fasthttp.ReleaseRequest(req)
	req.Header.SetMethod(fasthttp.MethodPost)
	req.Header.SetContentType("application/json")
	req.URI().QueryArgs().Set("op", "commits")
	req.SetBodyRaw(body)
	resp := fasthttp.AcquireResponse()
	defer fasthttp.ReleaseResponse(resp)
	if err := a.groupPeers.Client(addr).DoDeadline(req, resp, deadline); err != nil {
		fail(newAPIError(fasthttp.StatusServiceUnavailable, wire.CodeCoordinatorNotAvailable,
			"coordinator "+coordinator+" unreachable: "+err.Error(), true))
		return
	}
	if resp.StatusCode() != fasthttp.StatusOK {
		fail(relayedError(resp))
		return
	}
	var out commitsAnswerJSON
	if err := json.Unmarshal(resp.Body(), &out); err != nil || len(out.Results) != len(batch) {
		fail(newAPIError(fasthttp.StatusBadGateway, wire.CodeInternal,
			fmt.Sprintf("undecodable answer of coordinator %s to %d commits (%v): their outcome is unknown", coordinator, len(batch), err), true))
		return
	}
	for i, r := range out.Results {
		if r.Error != nil {
			r.Error.status = r.Status
			batch[i].done <- commitResult{err: r.Error}
			continue
		}
		batch[i].done <- commitResult{body: []byte(r.Answer)}
	}
}

// runForwardedCommits serves op=commits on the coordinator: every commit
// side by side, each answered as it would have been alone.
func (a *Agent) runForwardedCommits(body []byte) (commitsAnswerJSON, error) {
	var in commitsRequestJSON
	if err := decodeStrict(body, &in); err != nil {
		return commitsAnswerJSON{}, err
	}
	if len(in.Commits) == 0 || len(in.Commits) > maxForwardedCommits {
		return commitsAnswerJSON{}, fmt.Errorf("%w: %d commits: from 1 to %d", groupcoord.ErrInvalidRequest, len(in.Commits), maxForwardedCommits)
	}
	out := commitsAnswerJSON{Results: make([]commitResultJSON, len(in.Commits))}
	ctx, cancel := context.WithTimeout(context.Background(), groupRouteTimeout)
	defer cancel()
	var wg sync.WaitGroup
	for i, c := range in.Commits {
		wg.Go(func() {
			v, err := groupOps["commit"](a, ctx, groupOp{name: "commit", group: c.Group, body: c.Request})
			if err == nil {
				var b []byte
				if b, err = json.Marshal(v); err == nil {
					out.Results[i] = commitResultJSON{Answer: b}
					return
				}
			}
			var e *apiError
			if !errors.As(err, &e) {
				e = groupAPIError(err)
			}
			out.Results[i] = commitResultJSON{Status: e.status, Error: e}
		})
	}
	wg.Wait()
	return out, nil
}
