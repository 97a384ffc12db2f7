package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/logagent/logagent/client"
)

// movesRequestTimeout bounds each request of partition move, node drain and
// rebalance: they poll for up to -timeout (an hour by default), and one
// request that hangs must not hold the whole wait.
const movesRequestTimeout = 10 * time.Second

// waitFlags are the flags of a command that starts moves and waits for
// them (partition move, node drain, rebalance): the agent, how often to
// look, and how long to wait.
type waitFlags struct {
	addr              *agentFlags
	interval, timeout *time.Duration
}

// addWaitFlags registers -interval (default interval, what it is for) and
// -timeout (an hour; what goes on past it), with the agent's flags.
func addWaitFlags(fs *flag.FlagSet, interval time.Duration, intervalUsage, timeoutUsage string) *waitFlags {
	return &waitFlags{
		interval: fs.Duration("interval", interval, intervalUsage),
		addr:     addrFlag(fs),
		timeout:  fs.Duration("timeout", time.Hour, timeoutUsage),
	}
}

// movesCall is one run of such a command: a client of the agent (and of
// the partition leaders' agents it is sent to for a move's progress), the
// command's context, ended by -timeout or a signal, and its ticker.
type movesCall struct {
	c       *client.Client
	flags   *agentFlags
	ctx     context.Context
	timeout time.Duration
	ticker  *time.Ticker
	leaders map[string]*client.Client
}

// start checks -interval and makes the call; stop releases it.
func (f *waitFlags) start() (m *movesCall, stop func(), err error) {
	if *f.interval <= 0 {
		return nil, nil, fmt.Errorf("%w: -interval must be positive", errUsage)
	}
	c, err := newMovesClient(f.addr, *f.addr.addr)
	if err != nil {
		return nil, nil, err
	}
	ctx, cancel := timedContext(*f.timeout)
	m = &movesCall{c: c, flags: f.addr, ctx: ctx, timeout: *f.timeout, ticker: time.NewTicker(*f.interval), leaders: map[string]*client.Client{}}
	return m, func() { m.ticker.Stop(); cancel() }, nil
}

// newMovesClient is a client of addr with the flags' token and TLS, each
// request bounded by movesRequestTimeout.
func newMovesClient(f *agentFlags, addr string) (*client.Client, error) {
	at := *f
	at.addr = &addr
	return newAgentClient(&at, &http.Client{Timeout: movesRequestTimeout, Transport: &http.Transport{}})
}

// fail is err as the command reports it: one line (explain); an error
// answer of 400, 404 or 409 (a bad target, no such partition, a move in
// flight or none) is bad usage, exit 2.
func (m *movesCall) fail(err error) error {
	line := explain(err, m.c.Addr(), m.timeout)
	var apiErr *client.Error
	if errors.As(err, &apiErr) && (apiErr.Status == http.StatusBadRequest || apiErr.Status == http.StatusNotFound || apiErr.Status == http.StatusConflict) {
		return fmt.Errorf("%w: %w", errUsage, line)
	}
	return line
}

// tick waits for the next tick; an error when the command's time is up or
// it was interrupted.
func (m *movesCall) tick() error {
	select {
	case <-m.ctx.Done():
		return m.ctx.Err()
	case <-m.ticker.C:
		return nil
	}
}

// moveWithProgress is the partition's move as the agent answers, with its
// progress from the partition's leader when the agent does not lead it:
// only the leader sees its followers' progress. The leader's agent is asked
// with this agent's scheme, token and TLS; if it does not answer, the move
// is shown without progress.
func (m *movesCall) moveWithProgress(topic string, partition int) (*client.MoveStatus, error) {
	now, err := m.c.Reassignment(m.ctx, topic, partition)
	if err != nil || now.Reassignment == nil || len(now.Reassignment.Progress) > 0 || now.LeaderAddress == "" {
		return now, err
	}
	lc, ok := m.leaders[now.LeaderAddress]
	if !ok {
		scheme, _, _ := strings.Cut(m.c.Addr(), "://")
		if lc, err = newMovesClient(m.flags, scheme+"://"+now.LeaderAddress); err != nil {
			return now, nil
		}
		m.leaders[now.LeaderAddress] = lc
	}
	if fromLeader, err := lc.Reassignment(m.ctx, topic, partition); err == nil && fromLeader.Reassignment != nil {
		r := now.Reassignment
		r.Progress, r.LeaderLogStartOffset, r.LeaderLogEndOffset = fromLeader.Reassignment.Progress,
			fromLeader.Reassignment.LeaderLogStartOffset, fromLeader.Reassignment.LeaderLogEndOffset
	}
	return now, nil
}
