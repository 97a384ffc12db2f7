package ui

import (
	"context"
	"embed"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/logagent/logagent/wire"
)

//go:embed static
var static embed.FS

// Paths the handler answers; the agent routes these to it.
const (
	PathRedirect = "/ui"
	PathIndex    = "/ui/"
	PathScript   = "/ui/app.js"
	PathStyle    = "/ui/style.css"
	PathState    = "/ui/api/state"
)

// stateTimeout bounds one State call, so a poll never hangs on Consul; the
// page gives up on an answer a little later (app.js, answerTimeoutMs).
const stateTimeout = 3 * time.Second

// securityHeaders go on every answer. The policy allows nothing but this
// agent's own files and JSON: no inline script or style, no other origin,
// no framing.
var securityHeaders = [][2]string{
	{"Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"},
	{"X-Content-Type-Options", "nosniff"},
	{"Referrer-Policy", "no-referrer"},
}

type file struct {
	contentType string
	body        []byte
}

// files are the page's files by request path: a fixed table, so no request
// path ever names a file in the embedded tree.
var files = map[string]file{
	PathIndex:  {"text/html; charset=utf-8", mustRead("static/index.html")},
	PathScript: {"text/javascript; charset=utf-8", mustRead("static/app.js")},
	PathStyle:  {"text/css; charset=utf-8", mustRead("static/style.css")},
}

// mustRead reads an embedded file; a name missing from the tree is a
// mistake in this package, which every test of it reports.
func mustRead(name string) []byte {
	b, err := static.ReadFile(name)
	if err != nil {
		panic(fmt.Sprintf("ui: embedded %s: %v", name, err))
	}
	return b
}

// Handler serves the status page and its state.
type Handler struct {
	src Source
}

// New returns the handler of the page; src is asked on every state poll.
func New(src Source) *Handler { return &Handler{src: src} }

// Serve answers the page's paths (the Path constants) and 404 for anything
// else. It reads the path as the client sent it, before fasthttp resolves
// dots or escapes, so "/ui/%2e%2e/x" is simply not one of its paths.
func (h *Handler) Serve(ctx *fasthttp.RequestCtx) {
	for _, kv := range securityHeaders {
		ctx.Response.Header.Set(kv[0], kv[1])
	}
	path := string(ctx.Request.URI().PathOriginal())
	if i := strings.IndexByte(path, '?'); i >= 0 {
		path = path[:i]
	}
	switch path {
	case PathRedirect:
		// Relative links in the page (app.js, api/state) need the slash.
		ctx.Response.Header.Set("Location", PathIndex)
		ctx.SetStatusCode(fasthttp.StatusMovedPermanently)
		return
	case PathState:
		h.serveState(ctx)
		return
	}
	f, ok := files[path]
	if !ok {
		writeError(ctx, fasthttp.StatusNotFound, wire.CodeNotFound, "no endpoint "+path, false)
		return
	}
	// Revalidated on every load, so a new binary's page is never mixed
	// with an old cached script.
	ctx.Response.Header.Set("Cache-Control", "no-cache")
	ctx.SetContentType(f.contentType)
	ctx.SetBody(f.body)
}

func (h *Handler) serveState(ctx *fasthttp.RequestCtx) {
	callCtx, cancel := context.WithTimeout(context.Background(), stateTimeout)
	defer cancel()
	st, err := h.src.State(callCtx)
	if err != nil {
		writeError(ctx, fasthttp.StatusServiceUnavailable, wire.CodeServiceUnavailable, err.Error(), true)
		return
	}
	st.derive()
	body, err := json.Marshal(st)
	if err != nil {
		writeError(ctx, fasthttp.StatusInternalServerError, wire.CodeInternal, err.Error(), false)
		return
	}
	ctx.Response.Header.Set("Cache-Control", "no-store")
	ctx.SetContentType(wire.ContentTypeJSON)
	ctx.SetBody(append(body, '\n'))
}

// writeError answers in the API's JSON error format (docs/api.md).
func writeError(ctx *fasthttp.RequestCtx, status int, code, message string, retriable bool) {
	body, _ := json.Marshal(map[string]any{"error": map[string]any{"code": code, "message": message, "retriable": retriable}})
	ctx.SetStatusCode(status)
	ctx.SetContentType(wire.ContentTypeJSON)
	if retriable && status == fasthttp.StatusServiceUnavailable {
		ctx.Response.Header.Set("Retry-After", "1")
	}
	ctx.SetBody(append(body, '\n'))
}
