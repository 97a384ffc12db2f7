package agent

import (
	"errors"
	"slices"
	"testing"

	"github.com/valyala/fasthttp"

	"github.com/logagent/logagent/agent/reply"

	"github.com/logagent/logagent/wire"
)

// TestRouterCountsErrorAnswers: every error answer the router's handlers,
// the router itself or its server's error handler write is counted once
// by its code; successes and answers relayed from another agent are not.
func TestRouterCountsErrorAnswers(t *testing.T) {
	var codes []string
	rt := &router{onError: func(code string) { codes = append(codes, code) }}
	rt.add(fasthttp.MethodGet, "/ok", func(ctx *fasthttp.RequestCtx) { reply.WriteJSON(ctx, fasthttp.StatusOK, "fine") })
	rt.add(fasthttp.MethodGet, "/refused", func(ctx *fasthttp.RequestCtx) {
		reply.WriteAPIError(ctx, reply.NewAPIError(fasthttp.StatusServiceUnavailable, wire.CodeNotEnoughReplicas, "isr [n1]", true))
	})
	rt.add(fasthttp.MethodGet, "/failed", func(ctx *fasthttp.RequestCtx) { writeErr(ctx, errors.New("boom")) })
	rt.add(fasthttp.MethodGet, "/relayed", func(ctx *fasthttp.RequestCtx) {
		// A proxied answer: status and body as the leader sent them.
		ctx.SetStatusCode(fasthttp.StatusRequestedRangeNotSatisfiable)
		ctx.SetBodyString(`{"error":{"code":"offset_out_of_range"}}`)
	})
	rt.add(fasthttp.MethodGet, "/recovered", func(ctx *fasthttp.RequestCtx) {
		reply.WriteError(ctx, fasthttp.StatusServiceUnavailable, wire.CodeLeaderNotAvailable, "no leader", true)
		ctx.Response.Reset()
		reply.WriteJSON(ctx, fasthttp.StatusOK, "fine after all")
	})
	for _, tc := range []struct {
		method, path string
		want         []string
	}{
		{"GET", "/ok", nil},
		{"GET", "/refused", []string{wire.CodeNotEnoughReplicas}},
		{"GET", "/failed", []string{wire.CodeInternal}},
		{"GET", "/relayed", nil},
		{"GET", "/recovered", nil},
		{"POST", "/ok", []string{wire.CodeMethodNotAllowed}},
		{"GET", "/nowhere", []string{wire.CodeNotFound}},
	} {
		codes = nil
		var ctx fasthttp.RequestCtx
		ctx.Request.Header.SetMethod(tc.method)
		ctx.Request.SetRequestURI(tc.path)
		rt.handle(&ctx)
		if !slices.Equal(codes, tc.want) {
			t.Errorf("%s %s (%d): counted %v, want %v", tc.method, tc.path, ctx.Response.StatusCode(), codes, tc.want)
		}
	}

	codes = nil
	var ctx fasthttp.RequestCtx
	rt.serverError(&ctx, fasthttp.ErrBodyTooLarge)
	if ctx.Response.StatusCode() != fasthttp.StatusRequestEntityTooLarge || !slices.Equal(codes, []string{wire.CodeRequestTooLarge}) {
		t.Errorf("a body over the limit: %d, counted %v, want 413 and %s once", ctx.Response.StatusCode(), codes, wire.CodeRequestTooLarge)
	}
}
