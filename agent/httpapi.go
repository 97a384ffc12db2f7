package agent

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/logagent/logagent/agent/reply"

	"github.com/logagent/logagent/wire"
)

// writeErr answers with err when it is a *reply.APIError, else with a 500.
func writeErr(ctx *fasthttp.RequestCtx, err error) {
	var e *reply.APIError
	if errors.As(err, &e) {
		reply.WriteAPIError(ctx, e)
		return
	}
	reply.WriteError(ctx, fasthttp.StatusInternalServerError, wire.CodeInternal, err.Error(), false)
}

// route is one endpoint: a method, a path pattern and a handler.
type route struct {
	method  string
	pattern []string // path segments; "{name}" captures a segment
	handler fasthttp.RequestHandler
}

// router dispatches on path patterns such as
// "/v1/topics/{topic}/partitions/{partition}/records"; captured segments are
// read with pathParam. Unknown paths and methods get JSON errors.
type router struct {
	routes []route
	// onError, if set, is told the code of every error answer the
	// router's handlers (and the router itself, and its server before any
	// handler: serverError) wrote. An answer relayed unchanged from
	// another agent (a proxied fetch) is not one: that agent counts it.
	onError func(code string)
	// guard, when set, wraps the handler of every route added with add
	// (the client token check); addOpen adds a route without it.
	guard func(fasthttp.RequestHandler) fasthttp.RequestHandler
}

// addAPI adds an API route that takes the query parameters query and no
// other: an unknown one (a typo, partiton=2, had the record written to
// another partition, ofset=5 a consumer read from the start) is refused 400
// invalid_request, after the token check, before the handler runs. Routes
// whose parameters others define (Prometheus' scrape parameters, pprof's)
// are added with add and take any.
func (rt *router) addAPI(method, pattern string, query []string, handler fasthttp.RequestHandler) {
	rt.add(method, pattern, onlyQuery(method+" "+pattern, query, handler))
}

// onlyQuery refuses a request with a query parameter not in query before
// handler sees it.
func onlyQuery(endpoint string, query []string, handler fasthttp.RequestHandler) fasthttp.RequestHandler {
	takes := "takes no query parameter"
	if len(query) > 0 {
		takes = "takes " + strings.Join(query, ", ")
	}
	return func(ctx *fasthttp.RequestCtx) {
		for key := range ctx.QueryArgs().All() {
			if len(key) > 0 && !slices.Contains(query, string(key)) {
				reply.WriteError(ctx, fasthttp.StatusBadRequest, wire.CodeInvalidRequest,
					fmt.Sprintf("unknown query parameter %q: %s %s", key, endpoint, takes), false)
				return
			}
		}
		handler(ctx)
	}
}

func (rt *router) add(method, pattern string, handler fasthttp.RequestHandler) {
	if rt.guard != nil {
		handler = rt.guard(handler)
	}
	rt.addOpen(method, pattern, handler)
}

func (rt *router) addOpen(method, pattern string, handler fasthttp.RequestHandler) {
	rt.routes = append(rt.routes, route{method: method, pattern: splitPath(pattern), handler: handler})
}

func splitPath(path string) []string {
	return strings.Split(strings.Trim(path, "/"), "/")
}

func (rt *router) handle(ctx *fasthttp.RequestCtx) {
	rt.dispatch(ctx)
	rt.countError(ctx)
}

// countError tells onError of the code of an error answer in ctx. Only a
// status of 400 or more is looked at: success costs no user value lookup.
func (rt *router) countError(ctx *fasthttp.RequestCtx) {
	if rt.onError == nil || ctx.Response.StatusCode() < fasthttp.StatusBadRequest {
		return
	}
	if code, ok := reply.Code(ctx); ok {
		rt.onError(code)
	}
}

func (rt *router) dispatch(ctx *fasthttp.RequestCtx) {
	segments, err := rawSegments(ctx)
	if err != nil {
		reply.WriteError(ctx, fasthttp.StatusBadRequest, wire.CodeInvalidRequest, err.Error(), false)
		return
	}
	pathFound := false
	for _, r := range rt.routes {
		params, ok := matchPattern(r.pattern, segments)
		if !ok {
			continue
		}
		pathFound = true
		if string(ctx.Method()) != r.method {
			continue
		}
		for name, value := range params {
			ctx.SetUserValue(name, value)
		}
		r.handler(ctx)
		return
	}
	if pathFound {
		reply.WriteError(ctx, fasthttp.StatusMethodNotAllowed, wire.CodeMethodNotAllowed, string(ctx.Method())+" is not allowed on "+string(ctx.Path()), false)
		return
	}
	reply.WriteError(ctx, fasthttp.StatusNotFound, wire.CodeNotFound, "no endpoint "+string(ctx.Path()), false)
}

// rawSegments splits the path as the client sent it and unescapes each
// segment on its own, so an escaped "/" or ".." stays inside the segment
// (and is refused as a topic name) instead of being resolved as a path
// step by fasthttp's normalization.
func rawSegments(ctx *fasthttp.RequestCtx) ([]string, error) {
	raw := string(ctx.Request.URI().PathOriginal())
	if i := strings.IndexByte(raw, '?'); i >= 0 {
		raw = raw[:i]
	}
	segments := splitPath(raw)
	for i, seg := range segments {
		s, err := url.PathUnescape(seg)
		if err != nil {
			return nil, fmt.Errorf("bad path segment %q: %w", seg, err)
		}
		segments[i] = s
	}
	return segments, nil
}

// matchPattern matches path segments against a pattern and returns the
// captured segments.
func matchPattern(pattern, segments []string) (map[string]string, bool) {
	if len(pattern) != len(segments) {
		return nil, false
	}
	var params map[string]string
	for i, p := range pattern {
		if name, ok := strings.CutPrefix(p, "{"); ok {
			if segments[i] == "" {
				return nil, false
			}
			if params == nil {
				params = map[string]string{}
			}
			params[strings.TrimSuffix(name, "}")] = segments[i]
			continue
		}
		if p != segments[i] {
			return nil, false
		}
	}
	return params, true
}

// pathParam is a segment captured by the route's pattern.
func pathParam(ctx *fasthttp.RequestCtx, name string) string {
	v, _ := ctx.UserValue(name).(string)
	return v
}

// newServer returns a fasthttp server for one of the agent's APIs: handler
// (rt's, maybe wrapped) answers its requests, rt those fasthttp refuses. It sets nothing that wraps connections
// (MaxConnsPerIP, compression), so file bodies can still leave through
// sendfile (docs/design.md §8, fasthttp facts).
func newServer(rt *router, handler fasthttp.RequestHandler, maxBody int64, logger fasthttp.Logger) *fasthttp.Server {
	return &fasthttp.Server{
		Handler:                      handler,
		ErrorHandler:                 rt.serverError,
		Name:                         "logagent",
		ReadTimeout:                  60 * time.Second,
		WriteTimeout:                 60 * time.Second,
		IdleTimeout:                  2 * time.Minute,
		MaxRequestBodySize:           int(maxBody),
		CloseOnShutdown:              true,
		NoDefaultContentType:         true,
		TCPKeepalive:                 true,
		DisablePreParseMultipartForm: true,
		Logger:                       logger,
	}
}

// serverError answers requests fasthttp refuses before a handler runs, in
// the API's JSON error format. A read that timed out closes the connection
// without an answer, as Go's net/http server does: fasthttp hands here the
// timeout of a connection's first request even when nothing of it arrived,
// and a 400 written then is unsolicited, or, if the client sent its first
// request on the connection at that moment, taken as the answer to a
// request the agent never read (Go's client dials connections it may not
// use at once: under load they idle in its pool past the timeout).
func (rt *router) serverError(ctx *fasthttp.RequestCtx, err error) {
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		_ = ctx.Conn().Close()
		return
	}
	defer rt.countError(ctx)
	if errors.Is(err, fasthttp.ErrBodyTooLarge) {
		reply.WriteError(ctx, fasthttp.StatusRequestEntityTooLarge, wire.CodeRequestTooLarge, "request body over limits.max_request_bytes", false)
		return
	}
	reply.WriteError(ctx, fasthttp.StatusBadRequest, wire.CodeInvalidRequest, err.Error(), false)
}
