package testcluster

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/valyala/fasthttp"

	"github.com/logagent/logagent/internal/testenv"
	"github.com/logagent/logagent/ui"
)

// chromiumNames are the browser commands looked for on PATH when
// LOGAGENT_CHROMIUM does not name one; Debian's package is "chromium".
var chromiumNames = []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"}

// findChromium returns the browser the status page test drives, skipping
// the test (loudly) when there is none: `make test` installs Debian's
// chromium first where it can (as root), so a skip means it could not.
func findChromium(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("LOGAGENT_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range chromiumNames {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	testenv.SkipUnlessCI(t, "\n%s\nSKIPPED: NO CHROMIUM FOUND (looked for %s on PATH): the status page is NOT tested.\n"+
		"Install it: as root `apt-get update && apt-get install -y chromium` (make test does this when run as root),\n"+
		"or set LOGAGENT_CHROMIUM to a Chromium or Chrome binary.\n%s",
		strings.Repeat("!", 78), strings.Join(chromiumNames, ", "), strings.Repeat("!", 78))
	return ""
}

// screenshotDir is where the status page test keeps its screenshots:
// LOGAGENT_UI_SCREENSHOT_DIR, else a new temporary directory that is not
// removed (its path is logged).
func screenshotDir(t *testing.T) string {
	t.Helper()
	if dir := os.Getenv("LOGAGENT_UI_SCREENSHOT_DIR"); dir != "" {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	dir, err := os.MkdirTemp("", "logagent-ui-")
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

// page is one browser tab on an agent's status page.
type page struct {
	t   *testing.T
	ctx context.Context
	dir string
}

// openPage starts headless Chromium (its own temporary profile, stopped
// with the test) at a 1366x768 window, a laptop screen, on url.
func openPage(t *testing.T, browser, url string) *page {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(browser),
		// Chromium refuses to run as root with its sandbox.
		chromedp.NoSandbox,
		chromedp.WindowSize(1366, 768),
	)
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelTab := chromedp.NewContext(allocCtx)
	// Cancelling the allocator stops the browser process it started and
	// waits for it (chromedp kills what is left of its children too).
	t.Cleanup(func() {
		cancelTab()
		cancelAlloc()
	})
	if err := chromedp.Do(ctx, chromedp.EmulateViewport(1366, 768)); err != nil {
		t.Fatalf("start %s: %v", browser, err)
	}
	if err := chromedp.Do(ctx, chromedp.Navigate(url)); err != nil {
		t.Fatalf("open %s: %v", url, err)
	}
	return &page{t: t, ctx: ctx, dir: screenshotDir(t)}
}

// eval runs a script in the page.
func eval[T any](p *page, script string) (T, error) {
	ctx, cancel := context.WithTimeout(p.ctx, 5*time.Second)
	defer cancel()
	return chromedp.Run(ctx, chromedp.Evaluate[T](script))
}

// waitFor polls the page every 50 ms until the script returns true and
// returns how long that took; after timeout it fails the test, showing what
// the page says.
func (p *page) waitFor(timeout time.Duration, what, script string) time.Duration {
	p.t.Helper()
	start := time.Now()
	for {
		ok, err := eval[bool](p, script)
		if err == nil && ok {
			return time.Since(start)
		}
		if time.Since(start) > timeout {
			text, _ := eval[string](p, `document.body.innerText`)
			p.t.Fatalf("status page: no %s within %s (last error %v); the page says:\n%s", what, timeout, err, text)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// screenshot saves what the viewport shows as a PNG and logs its path.
func (p *page) screenshot(name string) string {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, 10*time.Second)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
	if err != nil {
		p.t.Fatalf("screenshot: %v", err)
	}
	path := filepath.Join(p.dir, name)
	if err := os.WriteFile(path, png, 0o644); err != nil {
		p.t.Fatal(err)
	}
	p.t.Logf("status page screenshot: %s", path)
	return path
}

// agentShows is a script that is true when the page shows the agent's card
// with the badge text and data-up attribute of that state.
func agentShows(node string, up bool) string {
	badge := "DOWN"
	if up {
		badge = "UP"
	}
	return fmt.Sprintf(`(() => {
  const c = document.querySelector('.agent[data-node=%q]');
  return c !== null && c.dataset.up === %q && c.querySelector('.badge').textContent === %q;
})()`, node, fmt.Sprint(up), badge)
}

// TestStatusPage (issue 16): agent n1's /ui/ in headless Chromium shows the
// three agents up with the build they run and the partitions of an RF 3 topic with their leaders,
// full ISR and positions; after kill -9 of n3 it shows n3 DOWN within 5 s,
// then the partitions under-replicated with n3 out of their ISR; after n1
// itself is killed, the page says it is not answering instead of showing
// the last data as live. Screenshots of the three states are kept.
func TestStatusPage(t *testing.T) {
	browser := findChromium(t)
	const topic, partitions = "orders", 3
	// The shipped timings: the time to DOWN is what users get.
	c := Start(t, Options{Timing: TimingShipped})
	t.Logf("agents run with %s", c.Timings)
	n1, n2, n3 := c.Agents[0], c.Agents[1], c.Agents[2]
	if err := n1.CreateTopic(TopicSpec{Name: topic, Partitions: partitions, ReplicationFactor: 3, MinInsyncReplicas: 2}); err != nil {
		t.Fatal(err)
	}
	for p := range partitions {
		c.WaitLeader(topic, p, 30*time.Second)
		c.WaitISR(topic, p, []string{"n1", "n2", "n3"}, 30*time.Second)
		if _, err := n1.Produce(topic, p, ContentTypeNDJSON, []byte(strings.Repeat("\"record\"\n", 10*(p+1))), "all", 5*time.Second); err != nil {
			t.Fatalf("produce to %s/%d: %v", topic, p, err)
		}
	}
	checkUIRoutes(t, n1)

	// A steady trickle of writes through n2 and n1, and reads from n1, so
	// the page has rates to show: records/s from every partition's log end,
	// and n1's own produce and fetch bytes/s from its counters. It goes on
	// through the kill (failed writes are expected then).
	stop := make(chan struct{})
	var writer sync.WaitGroup
	writer.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
			via := n2
			if i%2 == 1 {
				via = n1
				n1.Fetch(topic, i%partitions, 0, 1<<16, 0)
			}
			via.Produce(topic, i%partitions, ContentTypeNDJSON, []byte("\"tick\"\n\"tock\"\n"), "1", 2*time.Second)
		}
	})
	stopWriter := sync.OnceFunc(func() { close(stop); writer.Wait() })
	defer stopWriter()

	version := binaryVersion(t)
	pg := openPage(t, browser, "http://"+n1.ClientAddr+"/ui/")
	allUp := agentShows("n1", true) + " && " + agentShows("n2", true) + " && " + agentShows("n3", true)
	pg.waitFor(30*time.Second, "three agents UP with their build, the partitions led with a full ISR, a produce rate and n1's byte rates", fmt.Sprintf(`(() => {
  if (!(%s)) return false;
  if (document.querySelectorAll('.agent').length !== 3) return false;
  for (const b of document.querySelectorAll('.agent .build')) {
    if (b.textContent !== 'build ' + %q || b.classList.contains('mixed')) return false;
  }
  const rows = document.querySelectorAll('section.topic[data-topic=%q] tbody tr');
  if (rows.length !== %d) return false;
  for (const r of rows) {
    const leader = r.dataset.leader;
    const cells = r.querySelectorAll('td');
    if (!['n1', 'n2', 'n3'].includes(leader) || cells[1].textContent !== leader) return false;
    if (r.dataset.isr.split(',').sort().join(',') !== 'n1,n2,n3') return false;
    if (r.querySelectorAll('.replica.in').length !== 3 || r.classList.contains('under')) return false;
    if (!/^[0-9,]+$/.test(cells[4].textContent) || cells[9].textContent !== 'ok') return false;
  }
  return document.getElementById('t-partitions').textContent === String(%d) &&
    document.getElementById('t-under').textContent === '0' &&
    /^[1-9][0-9,.]* rec\/s$/.test(document.getElementById('t-produce').textContent) &&
    /^[1-9][0-9.]* (B|KiB|MiB)\/s$/.test(document.getElementById('t-produce-bytes').textContent) &&
    /^[1-9][0-9.]* (B|KiB|MiB)\/s$/.test(document.getElementById('t-fetch-bytes').textContent) &&
    document.getElementById('banner').hidden;
})()`, allUp, version, topic, partitions, partitions))
	pg.screenshot("1-all-up.png")

	killed := time.Now()
	n3.Kill()
	pg.waitFor(5*time.Second-time.Since(killed), "n3 shown DOWN after its kill -9",
		agentShows("n3", false)+" && "+agentShows("n1", true)+" && "+agentShows("n2", true))
	toDown := time.Since(killed)
	t.Logf("kill -9 of n3 to the page showing it DOWN: %s (%s)", toDown.Round(time.Millisecond), c.Timings)
	pg.screenshot("2-n3-down.png")

	// The leaders drop the dead agent from their ISRs (issue 12); the
	// page marks it out of every ISR and the rows under-replicated.
	pg.waitFor(30*time.Second, "every partition under-replicated with n3 out of its ISR", fmt.Sprintf(`(() => {
  const rows = document.querySelectorAll('section.topic[data-topic=%q] tbody tr');
  if (rows.length !== %d) return false;
  for (const r of rows) {
    if (!['n1', 'n2'].includes(r.dataset.leader) || r.dataset.isr.split(',').includes('n3')) return false;
    const n3 = r.querySelector('.replica[data-node="n3"]');
    if (!r.classList.contains('under') || n3 === null || !n3.classList.contains('out') || !n3.classList.contains('down')) return false;
    if (r.querySelectorAll('td')[9].textContent !== 'under-replicated') return false;
  }
  return document.getElementById('t-under').textContent === String(%d);
})()`, topic, partitions, partitions))
	t.Logf("kill -9 of n3 to the page showing every partition under-replicated: %s", time.Since(killed).Round(time.Millisecond))

	stopWriter()
	n1.Kill()
	toStale := pg.waitFor(10*time.Second, "the page saying its agent does not answer", `(() => {
  const b = document.getElementById('banner');
  return !b.hidden && b.textContent.includes('not answering') && document.getElementById('main').classList.contains('stale') &&
    document.getElementById('totals').classList.contains('stale');
})()`)
	t.Logf("kill -9 of n1 to its page saying it does not answer: %s", toStale.Round(time.Millisecond))
	pg.screenshot("3-agent-not-answering.png")
}

// checkUIRoutes checks the page's routes on the real binary's client API:
// content types, the redirect, 404s for what the page does not have.
func checkUIRoutes(t *testing.T, a *Agent) {
	t.Helper()
	noRedirect := &http.Client{Timeout: 10 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	tests := []struct {
		path        string
		status      int
		contentType string
		location    string
	}{
		{"/ui", 301, "", "/ui/"},
		{"/ui/", 200, "text/html; charset=utf-8", ""},
		{"/ui/app.js", 200, "text/javascript; charset=utf-8", ""},
		{"/ui/style.css", 200, "text/css; charset=utf-8", ""},
		{"/ui/api/state", 200, "application/json", ""},
		{"/ui/index.html", 404, "application/json", ""},
		{"/ui/%2e%2e%2fgo.mod", 404, "application/json", ""},
		{"/ui/../v1/health", 404, "application/json", ""},
		{"/ui/static/app.js", 404, "application/json", ""},
	}
	for _, tc := range tests {
		req, err := http.NewRequest(http.MethodGet, "http://"+a.ClientAddr+"/", nil)
		if err != nil {
			t.Fatal(err)
		}
		// Opaque keeps the path as written: no client-side cleaning.
		req.URL.Opaque = tc.path
		resp, err := noRedirect.Do(req)
		if err != nil {
			t.Fatalf("GET %s: %v", tc.path, err)
		}
		resp.Body.Close()
		if resp.StatusCode != tc.status || resp.Header.Get("Content-Type") != tc.contentType || resp.Header.Get("Location") != tc.location {
			t.Errorf("GET %s: %d %q Location %q, want %d %q %q", tc.path, resp.StatusCode, resp.Header.Get("Content-Type"),
				resp.Header.Get("Location"), tc.status, tc.contentType, tc.location)
		}
	}
}

// uiState is the part of /ui/api/state these tests read.
type uiState struct {
	Agents []struct {
		NodeID        string `json:"node_id"`
		ClientAddress string `json:"client_address"`
		Up            bool   `json:"up"`
		Draining      bool   `json:"draining"`
	} `json:"agents"`
	Topics []struct {
		Name       string `json:"name"`
		Partitions []struct {
			Partition       int      `json:"partition"`
			Replicas        []string `json:"replicas"`
			UnderReplicated bool     `json:"under_replicated"`
			Move            *struct {
				Target   []string `json:"target"`
				Phase    string   `json:"phase"`
				Progress []struct {
					Node         string   `json:"node"`
					CatchUpBytes int64    `json:"catch_up_bytes"`
					CaughtUp     *float64 `json:"caught_up"`
				} `json:"progress"`
			} `json:"move"`
		} `json:"partitions"`
	} `json:"topics"`
	Warnings []string `json:"warnings"`
	Totals   struct {
		Moving         int `json:"moving"`
		AgentsDraining int `json:"agents_draining"`
	} `json:"totals"`
}

func readUIState(t *testing.T, a *Agent) (uiState, error) {
	t.Helper()
	var st uiState
	status, body, err := a.Get("/ui/api/state", "")
	if err != nil {
		return st, err
	}
	if status != http.StatusOK {
		return st, fmt.Errorf("GET /ui/api/state: %d %s", status, body)
	}
	return st, json.Unmarshal(body, &st)
}

// agentsLine renders the agents of a state as "n1:up n2:down ...", with
// "?" for an agent without a client address.
func (st uiState) agentsLine() string {
	var parts []string
	for _, a := range st.Agents {
		s := a.NodeID + ":down"
		if a.Up {
			s = a.NodeID + ":up"
		}
		if a.ClientAddress == "" {
			s += "?"
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, " ")
}

// fixedState is a status page source that always answers the same state.
type fixedState ui.State

func (f fixedState) State(context.Context) (ui.State, error) {
	st := ui.State(f)
	st.TimeUnixMilli = time.Now().UnixMilli()
	return st, nil
}

// TestStatusPageMarksMixedBuilds: while the agents up run more than one
// build, every card's build line is marked (a rolling upgrade under way, or
// an agent left behind); a down agent's older build does not count, and an
// agent that registered none shows a dash. The
// page's script is what is tested: it is served by the status page's own
// handler, over a state fixed here, since the cluster's agents all run
// this one binary.
func TestStatusPageMarksMixedBuilds(t *testing.T) {
	browser := findChromium(t)
	agents := []ui.Agent{
		{NodeID: "n1", ClientAddress: "127.0.0.1:7070", PeerAddress: "127.0.0.1:7171", Up: true, Version: "v2"},
		{NodeID: "n2", ClientAddress: "127.0.0.1:7071", PeerAddress: "127.0.0.1:7172", Up: true, Version: "v2"},
		{NodeID: "n3", ClientAddress: "127.0.0.1:7072", PeerAddress: "127.0.0.1:7173", Up: false, Version: "v1"},
		{NodeID: "n4", Up: false},
	}
	cases := []struct {
		name  string
		n3Up  bool
		mixed bool
	}{
		{"one build up, an older one down", false, false},
		{"two builds up", true, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			state := fixedState{Self: ui.Self{NodeID: "n1", State: "serving"}, Agents: slices.Clone(agents)}
			state.Agents[2].Up = c.n3Up
			srv := &fasthttp.Server{Handler: ui.New(state).Serve}
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			var serving sync.WaitGroup
			serving.Go(func() { _ = srv.Serve(ln) })
			t.Cleanup(func() {
				_ = srv.Shutdown()
				serving.Wait()
			})

			pg := openPage(t, browser, "http://"+ln.Addr().String()+"/ui/")
			pg.waitFor(10*time.Second, "each agent's build line", fmt.Sprintf(`(() => {
  const line = (n) => document.querySelector('.agent[data-node="' + n + '"] .build');
  const want = {n1: 'build v2', n2: 'build v2', n3: 'build v1', n4: 'build –'};
  for (const [n, text] of Object.entries(want)) {
    const b = line(n);
    if (b === null || b.textContent !== text || b.classList.contains('mixed') !== %t) return false;
  }
  return true;
})()`, c.mixed))
		})
	}
}

// TestStatusStateWithoutConsul: when its agent cannot reach Consul, the
// status page's state still lists every agent, with the addresses last
// seen and up or down as Consul last said, and a warning that says so;
// the warning goes once Consul answers again.
func TestStatusStateWithoutConsul(t *testing.T) {
	c := Start(t, Options{Proxies: true})
	n1 := c.Agents[0]
	createReplicatedTopic(t, c, "orders")
	const all = "n1:up n2:up n3:up"
	c.WaitFor(10*time.Second, "three agents up and no warning", func() bool {
		st, err := readUIState(t, n1)
		return err == nil && st.agentsLine() == all && len(st.Warnings) == 0
	})

	n1.ConsulProxy.CutBoth()
	var st uiState
	c.WaitFor(10*time.Second, "a warning that Consul does not answer", func() bool {
		var err error
		st, err = readUIState(t, n1)
		return err == nil && len(st.Warnings) == 1 && strings.Contains(st.Warnings[0], "Consul did not answer")
	})
	t.Logf("cut from Consul, n1's page says: %q", st.Warnings[0])
	if got := st.agentsLine(); got != all {
		t.Errorf("agents while cut from Consul: %s, want %s (as Consul last said)", got, all)
	}

	n1.ConsulProxy.Heal()
	c.WaitFor(30*time.Second, "the warning gone once Consul answers", func() bool {
		st, err := readUIState(t, n1)
		return err == nil && len(st.Warnings) == 0 && len(st.Agents) == 3
	})
}

// TestStatusPageMove (issue 18): during a move whose catch-up is throttled
// so that it takes seconds, the status page's state shows the move on
// every agent (target, phase "adding"), the partition not under-replicated
// for it, and on the leader the added replica's share caught up and bytes
// sent growing; an agent being drained is marked, and both are counted in
// the totals. Once the move is done the state shows none.
func TestStatusPageMove(t *testing.T) {
	const topic = "uimove"
	c := Start(t, Options{Agents: 4, HCL: `
replication {
  reassign_max_bytes_per_second = "512KiB"
}
`})
	leader, _ := createReplicatedTopic(t, c, topic)
	if leader.NodeID != "n1" {
		t.Fatalf("leader %s, want the preferred replica n1", leader.NodeID)
	}
	preload(t, leader, topic, 3<<20)
	target := []string{"n1", "n2", "n4"}
	if err := startMove(leader, topic, 0, target); err != nil {
		t.Fatal(err)
	}
	// n3, which the move removes, is also being drained: the flag starts
	// no second move of a partition already moving.
	if err := leader.do(http.MethodPost, leader.url("/v1/nodes/n3/drain", nil), "", nil, nil); err != nil {
		t.Fatalf("drain n3: %v", err)
	}
	type seen struct {
		caughtUp float64
		sent     int64
	}
	var first, last *seen
	c.WaitFor(30*time.Second, "the leader's page showing n4 a third caught up", func() bool {
		st, err := readUIState(t, leader)
		if err != nil || len(st.Topics) != 1 || len(st.Topics[0].Partitions) != 1 {
			return false
		}
		p := st.Topics[0].Partitions[0]
		if p.Move == nil {
			t.Fatalf("the leader's page shows no move (done before the catch-up was seen, or not shown)")
		}
		if !slices.Equal(p.Move.Target, target) || p.Move.Phase != "adding" || p.UnderReplicated ||
			st.Totals.Moving != 1 || st.Totals.AgentsDraining != 1 {
			t.Fatalf("the leader's state during the move: %+v, totals %+v", p, st.Totals)
		}
		for _, a := range st.Agents {
			if a.Draining != (a.NodeID == "n3") {
				t.Fatalf("agent %s draining %v", a.NodeID, a.Draining)
			}
		}
		if len(p.Move.Progress) != 1 || p.Move.Progress[0].Node != "n4" || p.Move.Progress[0].CaughtUp == nil {
			return false
		}
		s := &seen{*p.Move.Progress[0].CaughtUp, p.Move.Progress[0].CatchUpBytes}
		if first == nil {
			first = s
		}
		last = s
		return s.caughtUp > 0.33 && s.caughtUp < 1
	})
	if !(last.caughtUp > first.caughtUp && last.sent > first.sent) {
		t.Errorf("the catch-up did not grow on the page: first %+v, last %+v", *first, *last)
	}
	t.Logf("the leader's page showed n4 from %.2f (%d bytes sent) to %.2f (%d bytes) caught up", first.caughtUp, first.sent, last.caughtUp, last.sent)
	st, err := readUIState(t, agentsNamed(c, []string{"n2"})[0])
	if err != nil {
		t.Fatal(err)
	}
	if p := st.Topics[0].Partitions[0]; p.Move == nil || p.Move.Phase != "adding" || len(p.Move.Progress) != 0 || st.Totals.Moving != 1 {
		t.Errorf("a follower's state during the move: %+v, totals %+v (want the move without progress)", p, st.Totals)
	}
	waitMoveDone(t, c, topic, 0, target, 60*time.Second)
	c.WaitFor(10*time.Second, "the page showing no move", func() bool {
		st, err := readUIState(t, leader)
		return err == nil && st.Topics[0].Partitions[0].Move == nil && st.Totals.Moving == 0
	})
	if err := leader.do(http.MethodDelete, leader.url("/v1/nodes/n3/drain", nil), "", nil, nil); err != nil {
		t.Fatalf("cancel the drain of n3: %v", err)
	}
}

// binaryVersion is the build the agents run, as `logagent version` prints it.
func binaryVersion(t *testing.T) string {
	t.Helper()
	out, err := exec.Command(Binary(t), "version").Output()
	if err != nil {
		t.Fatalf("logagent version: %v", err)
	}
	fields := strings.Fields(string(out))
	if len(fields) != 2 || fields[0] != "logagent" {
		t.Fatalf("logagent version printed %q, want \"logagent <version>\"", out)
	}
	return fields[1]
}
