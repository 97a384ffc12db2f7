package agent

import (
	"bytes"
	"net/http"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"
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

	// The mutex and block profiles sample (they were listed but empty):
	// the agent runs in this process, so this test's own contention on a
	// mutex and a channel must show in them.
	unblock := make(chan struct{})
	time.AfterFunc(20*time.Millisecond, func() { close(unblock) })
	<-unblock // blocked far longer than blockProfileRate: recorded
	var mu sync.Mutex
	contend(t, &mu)
	for _, p := range []struct{ profile, want string }{
		{"mutex", "sampling period=" + strconv.Itoa(mutexProfileFraction)},
		{"mutex", "agent.contend"},
		{"block", "agent.TestPprofOnlyWhenEnabled"},
	} {
		status, body := ta.call(http.MethodGet, "/debug/pprof/"+p.profile+"?debug=1", "", nil)
		if status != http.StatusOK || !bytes.Contains(body, []byte(p.want)) {
			t.Errorf("GET /debug/pprof/%s?debug=1 = %d without %q:\n%.600s", p.profile, status, p.want, body)
		}
	}
}

// contend makes goroutines fight over mu long enough, and often enough,
// for the one-in-mutexProfileFraction sampling to record some.
func contend(t *testing.T, mu *sync.Mutex) {
	t.Helper()
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 2000 {
				mu.Lock()
				time.Sleep(time.Microsecond)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
}
