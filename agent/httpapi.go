package agent

import (
	"encoding/json"
	"strconv"
	"time"

	"github.com/valyala/fasthttp"
)

// Error codes of the HTTP APIs (DESIGN §8). Every error response is JSON:
//
//	{"error":{"code":"not_enough_replicas","message":"...","retriable":true}}
const (
	codeInvalidRequest     = "invalid_request"
	codeNotFound           = "not_found"
	codeMethodNotAllowed   = "method_not_allowed"
	codeServiceUnavailable = "service_unavailable"
)

type apiError struct {
	Code      string `json:"code"`
	Message   string `json:"message"`
	Retriable bool   `json:"retriable"`
}

func writeError(ctx *fasthttp.RequestCtx, status int, code, message string, retriable bool) {
	body, _ := json.Marshal(struct {
		Error apiError `json:"error"`
	}{apiError{Code: code, Message: message, Retriable: retriable}})
	ctx.Response.Reset()
	ctx.SetStatusCode(status)
	ctx.SetContentType("application/json")
	if retriable && status == fasthttp.StatusServiceUnavailable {
		ctx.Response.Header.Set("Retry-After", strconv.Itoa(1))
	}
	ctx.SetBody(append(body, '\n'))
}

func writeJSON(ctx *fasthttp.RequestCtx, status int, v any) {
	body, err := json.Marshal(v)
	if err != nil {
		writeError(ctx, fasthttp.StatusInternalServerError, "internal", err.Error(), false)
		return
	}
	ctx.SetStatusCode(status)
	ctx.SetContentType("application/json")
	ctx.SetBody(append(body, '\n'))
}

// route is one endpoint: a method and a handler.
type route struct {
	method  string
	handler fasthttp.RequestHandler
}

// router dispatches exact paths; unknown paths and methods get JSON errors.
type router map[string][]route

func (rt router) handle(ctx *fasthttp.RequestCtx) {
	routes, ok := rt[string(ctx.Path())]
	if !ok {
		writeError(ctx, fasthttp.StatusNotFound, codeNotFound, "no endpoint "+string(ctx.Path()), false)
		return
	}
	for _, r := range routes {
		if string(ctx.Method()) == r.method {
			r.handler(ctx)
			return
		}
	}
	writeError(ctx, fasthttp.StatusMethodNotAllowed, codeMethodNotAllowed, string(ctx.Method())+" is not allowed on "+string(ctx.Path()), false)
}

// newServer returns a fasthttp server for one of the agent's APIs. It sets
// nothing that wraps connections (MaxConnsPerIP, compression), so file bodies
// can still leave through sendfile (FIELD-NOTES, fasthttp).
func newServer(handler fasthttp.RequestHandler, maxBody int64, logger fasthttp.Logger) *fasthttp.Server {
	return &fasthttp.Server{
		Handler:                      handler,
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
