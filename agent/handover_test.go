package agent

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/logagent/logagent/wire"
)

// TestStoppingAgentForwardsUntilHandedOver: the sidecar of a leader that
// stops gracefully serves on while the partition is handed over: a write
// it takes meanwhile is refused by its own draining loop and forwarded to
// the new leader once that one is elected, so it is acknowledged at the
// next epoch. Its clients see no unknown outcome and no refusal of the
// handover itself, only, once the handover is over, 503
// service_unavailable and then a refused connection.
func TestStoppingAgentForwardsUntilHandedOver(t *testing.T) {
	c := startTestCluster(t, 3, "")
	c.createTopic(c.agents[0], "ho", 1, 3, 2)
	leader, pd := c.waitLeader("ho", 0, 3)

	type answer struct {
		value   string
		status  int
		code    string
		message string
		epoch   int32
		err     error
	}
	var mu sync.Mutex
	var answers []answer
	stop := make(chan struct{})
	var wg sync.WaitGroup
	client := &http.Client{Timeout: 10 * time.Second}
	defer client.CloseIdleConnections()
	for i := range 4 {
		wg.Go(func() {
			for seq := 0; ; seq++ {
				select {
				case <-stop:
					return
				default:
				}
				a := answer{value: fmt.Sprintf("w%d-%d", i, seq)}
				resp, err := client.Post(fmt.Sprintf("http://%s/v1/topics/ho/records?partition=0&acks=all&timeout=5s", leader.client),
					wire.ContentTypeNDJSON, strings.NewReader(a.value))
				if err == nil {
					var body []byte
					body, err = io.ReadAll(resp.Body)
					resp.Body.Close()
					a.status = resp.StatusCode
					var ok struct {
						Epoch int32 `json:"epoch"`
						Error struct {
							Code    string `json:"code"`
							Message string `json:"message"`
						} `json:"error"`
					}
					if err == nil {
						err = json.Unmarshal(body, &ok)
					}
					a.epoch, a.code, a.message = ok.Epoch, ok.Error.Code, ok.Error.Message
				}
				a.err = err
				mu.Lock()
				answers = append(answers, a)
				mu.Unlock()
				if err != nil || a.status != http.StatusOK {
					time.Sleep(10 * time.Millisecond)
				}
			}
		})
	}
	time.Sleep(300 * time.Millisecond)
	if err := leader.stop(); err != nil {
		t.Fatal(err)
	}
	close(stop)
	wg.Wait()

	// Linux resets the connections still in a listener's accept queue when
	// it closes: their clients wrote a request the agent never read, and
	// cannot tell that from a reset after it. Such a write must not be in
	// the log.
	next, _ := c.waitLeader("ho", 0, -1)
	logged := map[string]bool{}
	for _, v := range next.fetchValues("ho", 0, 0) {
		logged[v] = true
	}
	counts := map[string]int{}
	for _, a := range answers {
		if a.err == nil && a.status == http.StatusOK && !logged[a.value] {
			t.Errorf("acknowledged write %s is not in the new leader's log", a.value)
		}
		switch {
		case a.err != nil && neverSent(a.err):
			counts["connection refused"]++
		case a.err != nil && errors.Is(a.err, syscall.ECONNRESET) && !logged[a.value]:
			counts["reset, not appended (in the closing listener's queue)"]++
		case a.err != nil:
			t.Errorf("a write through the stopping agent: %v: its outcome is unknown", a.err)
		case a.status == http.StatusOK && a.epoch > pd.Epoch:
			counts["forwarded to the new leader"]++
		case a.status == http.StatusOK:
			counts["appended before the handover"]++
		case a.status == http.StatusServiceUnavailable && a.code == wire.CodeServiceUnavailable:
			counts["not serving, after the handover"]++
		default:
			t.Errorf("a write through the stopping agent: %d %s: %s", a.status, a.code, a.message)
		}
	}
	t.Logf("writes through %s as it stopped: %v", leader.nodeID, counts)
	if counts["forwarded to the new leader"] == 0 {
		t.Errorf("no write the stopping agent took was forwarded to the new leader (%v)", counts)
	}
}
