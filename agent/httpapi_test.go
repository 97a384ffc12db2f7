package agent

import (
	"encoding/json"
	"errors"
	"io"
	"log"
	"net"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/logagent/logagent/agent/reply"

	"github.com/logagent/logagent/wire"
)

func TestRouter(t *testing.T) {
	rt := &router{}
	hit := func(name string) fasthttp.RequestHandler {
		return func(ctx *fasthttp.RequestCtx) {
			ctx.SetBodyString(name + " topic=" + pathParam(ctx, "topic") + " partition=" + pathParam(ctx, "partition"))
		}
	}
	rt.add(fasthttp.MethodGet, "/v1/topics", hit("list"))
	rt.add(fasthttp.MethodPost, "/v1/topics", hit("create"))
	rt.add(fasthttp.MethodGet, "/v1/topics/{topic}", hit("describe"))
	rt.add(fasthttp.MethodPost, "/v1/topics/{topic}/records", hit("produce"))
	rt.add(fasthttp.MethodGet, "/v1/topics/{topic}/partitions/{partition}/records", hit("fetch"))

	tests := []struct {
		method, path string
		status       int
		body         string
		code         string
	}{
		{"GET", "/v1/topics", 200, "list topic= partition=", ""},
		{"POST", "/v1/topics", 200, "create topic= partition=", ""},
		{"GET", "/v1/topics/", 200, "list topic= partition=", ""},
		{"GET", "/v1/topics/orders", 200, "describe topic=orders partition=", ""},
		{"POST", "/v1/topics/orders/records", 200, "produce topic=orders partition=", ""},
		{"GET", "/v1/topics/a.b-c_d/partitions/7/records", 200, "fetch topic=a.b-c_d partition=7", ""},
		{"DELETE", "/v1/topics/orders", 405, "", wire.CodeMethodNotAllowed},
		{"GET", "/v1/topics/orders/records", 405, "", wire.CodeMethodNotAllowed},
		{"GET", "/v1/topics/orders/partitions/7", 404, "", wire.CodeNotFound},
		{"GET", "/v2/topics", 404, "", wire.CodeNotFound},
	}
	for _, tc := range tests {
		t.Run(tc.method+" "+tc.path, func(t *testing.T) {
			var ctx fasthttp.RequestCtx
			ctx.Request.Header.SetMethod(tc.method)
			ctx.Request.SetRequestURI(tc.path)
			rt.handle(&ctx)
			if got := ctx.Response.StatusCode(); got != tc.status {
				t.Fatalf("status %d, want %d (%s)", got, tc.status, ctx.Response.Body())
			}
			if tc.code == "" {
				if got := string(ctx.Response.Body()); got != tc.body {
					t.Fatalf("body %q, want %q", got, tc.body)
				}
				return
			}
			var e struct {
				Error reply.APIError `json:"error"`
			}
			if err := json.Unmarshal(ctx.Response.Body(), &e); err != nil || e.Error.Code != tc.code {
				t.Fatalf("body %s, want code %s (%v)", ctx.Response.Body(), tc.code, err)
			}
		})
	}
}

func TestErrorBodies(t *testing.T) {
	lso, hw := int64(5), int64(42)
	e := reply.NewAPIError(fasthttp.StatusRequestedRangeNotSatisfiable, wire.CodeOffsetOutOfRange, "offset 99 is outside the log", false)
	e.LogStartOffset, e.HighWatermark = &lso, &hw
	var ctx fasthttp.RequestCtx
	reply.WriteAPIError(&ctx, e)
	want := `{"error":{"code":"offset_out_of_range","message":"offset 99 is outside the log","retriable":false,"log_start_offset":5,"high_watermark":42}}` + "\n"
	if got := string(ctx.Response.Body()); got != want || ctx.Response.StatusCode() != 416 {
		t.Fatalf("%d %s\nwant 416 %s", ctx.Response.StatusCode(), got, want)
	}
	if h := ctx.Response.Header.Peek("Retry-After"); h != nil {
		t.Fatalf("Retry-After %q on a 416", h)
	}

	ctx.Response.Reset()
	reply.WriteAPIError(&ctx, reply.NewAPIError(fasthttp.StatusServiceUnavailable, wire.CodeNotEnoughReplicas, "isr [n1]", true))
	if h := string(ctx.Response.Header.Peek("Retry-After")); h != "1" {
		t.Fatalf("retriable 503 without Retry-After: %q", h)
	}
}

// TestUnusedConnectionClosedWithoutAnswer: a connection on which no request
// arrives within the read timeout is closed without the unsolicited 400 a
// client sending its first request at that moment would take for the answer
// to it, and so is one whose request stalls in its headers; a malformed
// request still gets its 400, and one that arrives in time its answer.
func TestUnusedConnectionClosedWithoutAnswer(t *testing.T) {
	// The server's goroutines count the errors; the test reads them.
	var mu sync.Mutex
	var codes []string
	rt := &router{onError: func(code string) {
		mu.Lock()
		codes = append(codes, code)
		mu.Unlock()
	}}
	rt.add(fasthttp.MethodGet, "/v1/topics", func(ctx *fasthttp.RequestCtx) { ctx.SetBodyString("ok") })
	srv := newServer(rt, rt.handle, 1<<20, log.New(io.Discard, "", 0))
	srv.ReadTimeout = 200 * time.Millisecond
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Go(func() { _ = srv.Serve(ln) })
	defer func() {
		_ = srv.Shutdown()
		wg.Wait()
	}()
	answer := func(send string) string {
		t.Helper()
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if send != "" {
			if _, err := io.WriteString(c, send); err != nil {
				t.Fatal(err)
			}
		}
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		got, err := io.ReadAll(c)
		if err != nil && !errors.Is(err, syscall.ECONNRESET) {
			t.Fatalf("reading the answer to %q: %v", send, err)
		}
		return string(got)
	}
	if got := answer(""); got != "" {
		t.Fatalf("an unused connection got %q, want nothing", got)
	}
	if got := answer("GET /v1/topics HTTP/1.1\r\nHo"); got != "" {
		t.Fatalf("a request stalled in its headers got %q, want nothing", got)
	}
	if got := answer("GET /v1/topics HTTP/1.1\r\nHost: x\r\nContent-Length: -5\r\n\r\n"); !strings.HasPrefix(got, "HTTP/1.1 400") {
		t.Fatalf("a malformed request got %q, want a 400", got)
	}
	if got := answer("GET /v1/topics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"); !strings.HasPrefix(got, "HTTP/1.1 200") || !strings.HasSuffix(got, "ok") {
		t.Fatalf("a request in time got %q", got)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(codes) != 1 || codes[0] != wire.CodeInvalidRequest {
		t.Fatalf("error answers counted %v, want the malformed request's only", codes)
	}
}
