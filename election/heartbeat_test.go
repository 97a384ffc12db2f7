package election

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/logagent/logagent/internal/consultest"
)

// slowPasses delays every check pass by delay before it reaches Consul, as
// a Consul (or a machine) busy with a failover answers late.
type slowPasses struct {
	next  http.RoundTripper
	delay time.Duration
}

func (s slowPasses) RoundTrip(req *http.Request) (*http.Response, error) {
	if strings.HasPrefix(req.URL.Path, "/v1/agent/check/update/") {
		select {
		case <-time.After(s.delay):
		case <-req.Context().Done():
			return nil, req.Context().Err()
		}
	}
	return s.next.RoundTrip(req)
}

// TestLeaseOutlastsSlowCheckPasses: with every check pass answered after
// half the check TTL the lease holds, because passes leave on time without
// waiting for the one before. A pass given up after the pass interval, or
// passes sent one at a time (spaced by their latency), lapse it: at a
// 10,000-partition failover that took every leadership with it.
func TestLeaseOutlastsSlowCheckPasses(t *testing.T) {
	const (
		checkTTL = 6 * time.Second
		// Above the interval (2 s, where passes used to be given up) and
		// above what passes one at a time survive ((checkTTL - margin)/2),
		// below what the lease needs (checkTTL - margin - interval).
		latency = 3 * time.Second
		watch   = 16 * time.Second
	)
	srv := consultest.Start(t)
	c := newTestClient(t, srv, "slow", func(cfg *Config) {
		cfg.CheckTTL = checkTTL
		cfg.Consul.HttpClient = &http.Client{Transport: slowPasses{next: http.DefaultTransport, delay: latency}}
	})
	register(t, c)
	for wait := time.Now().Add(10 * time.Second); c.LeaseDeadline().IsZero(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(wait) {
			t.Fatal("no lease 10s after registering")
		}
	}
	deadline := time.Now().Add(watch)
	for time.Now().Before(deadline) {
		if c.LeaseDeadline().IsZero() {
			t.Fatalf("lease lapsed %s after it began, with every check pass answered after %s (check ttl %s)",
				watch-time.Until(deadline), latency, checkTTL)
		}
		time.Sleep(50 * time.Millisecond)
	}
	// Consul saw the passes too: the check is passing.
	checks, _, err := srv.Client().Health().Checks("logagent", nil)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, chk := range checks {
		if chk.CheckID == c.checkID {
			found = true
			if chk.Status != "passing" {
				t.Fatalf("check %s is %s", chk.CheckID, chk.Status)
			}
		}
	}
	if !found {
		t.Fatalf("check %s not in Consul (checks %v)", c.checkID, checks)
	}
}
