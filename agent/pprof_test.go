package agent

import (
	"bytes"
	"net/http"
	"path/filepath"
	"testing"
)

// TestPprofOnlyWhenEnabled: the runtime profiles are served on the client
// address when client.pprof is set, and the path is unknown otherwise.
func TestPprofOnlyWhenEnabled(t *testing.T) {
	c := startTestCluster(t, 1, "")
	ta := c.agents[0]
	if status, body := ta.call(http.MethodGet, "/debug/pprof/heap", "", nil); status != http.StatusNotFound {
		t.Fatalf("pprof off by default: GET /debug/pprof/heap = %d %s, want 404", status, body)
	}
	if err := ta.stop(); err != nil {
		t.Fatal(err)
	}
	ta.configs = append(ta.configs, writeTestFile(t, filepath.Join(t.TempDir(), "pprof.hcl"), "client { pprof = true }\n"))
	ta.start()
	status, body := ta.call(http.MethodGet, "/debug/pprof/", "", nil)
	if status != http.StatusOK || !bytes.Contains(body, []byte("goroutine")) {
		t.Fatalf("GET /debug/pprof/ = %d %.200s, want the index", status, body)
	}
	status, body = ta.call(http.MethodGet, "/debug/pprof/heap", "", nil)
	// A profile is gzipped protobuf.
	if status != http.StatusOK || !bytes.HasPrefix(body, []byte{0x1f, 0x8b}) {
		t.Fatalf("GET /debug/pprof/heap = %d %.40q, want a gzipped profile", status, body)
	}
}
