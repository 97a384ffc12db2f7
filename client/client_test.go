package client

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/logagent/logagent/internal/testseed"
)

func TestNewAddress(t *testing.T) {
	cases := []struct {
		name, addr, env, want string
		wantErr               bool
	}{
		{"default", "", "", DefaultAddr, false},
		{"from env", "", "http://10.0.0.1:9000", "http://10.0.0.1:9000", false},
		{"argument wins over env", "127.0.0.1:7071", "http://10.0.0.1:9000", "http://127.0.0.1:7071", false},
		{"host:port means http", "localhost:7072", "", "http://localhost:7072", false},
		{"https kept", "https://agent.example:7070/", "", "https://agent.example:7070", false},
		{"ipv6", "[::1]:7070", "", "http://[::1]:7070", false},
		{"no port means the agent's", "127.0.0.1", "", "http://127.0.0.1:7070", false},
		{"no port, ipv6", "http://[::1]", "", "http://[::1]:7070", false},
		{"no port, https", "https://agent.example", "", "https://agent.example:7070", false},
		{"other scheme", "ftp://x:1", "", "", true},
		{"path", "http://x:1/api", "", "", true},
		{"query", "http://x:1?a=b", "", "", true},
		{"no host", "http://", "", "", true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Setenv(AddrEnv, c.env)
			cl, err := New(c.addr)
			if c.wantErr {
				if !errors.Is(err, ErrInvalidAddr) {
					t.Fatalf("New(%q) = %v, want ErrInvalidAddr", c.addr, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if cl.Addr() != c.want {
				t.Fatalf("Addr() = %q, want %q", cl.Addr(), c.want)
			}
		})
	}
}

func TestErrorDecoding(t *testing.T) {
	cases := []struct {
		name       string
		status     int
		body       string
		retryAfter string
		want       Error
		sentinel   error
		retriable  bool
	}{
		{
			name: "retriable 503", status: 503, retryAfter: "2",
			body: `{"error":{"code":"not_enough_replicas","message":"isr 1 < 2","retriable":true}}`,
			want: Error{Status: 503, Code: CodeNotEnoughReplicas, Message: "isr 1 < 2", Retriable: true,
				RetryAfter: 2 * time.Second, LogStartOffset: -1, HighWatermark: -1},
			sentinel: ErrNotEnoughReplicas, retriable: true,
		},
		{
			name: "after append is never retriable", status: 503, retryAfter: "1",
			body: `{"error":{"code":"not_enough_replicas_after_append","message":"m","retriable":true}}`,
			want: Error{Status: 503, Code: CodeNotEnoughReplicasAfterAppend, Message: "m", Retriable: true,
				RetryAfter: time.Second, LogStartOffset: -1, HighWatermark: -1},
		},
		{
			name: "out of range carries bounds", status: 416,
			body:     `{"error":{"code":"offset_out_of_range","message":"below","retriable":false,"log_start_offset":100,"high_watermark":250}}`,
			want:     Error{Status: 416, Code: CodeOffsetOutOfRange, Message: "below", LogStartOffset: 100, HighWatermark: 250},
			sentinel: ErrOffsetOutOfRange,
		},
		{
			name: "unknown topic", status: 404,
			body:     `{"error":{"code":"unknown_topic","message":"no topic t","retriable":false}}`,
			want:     Error{Status: 404, Code: CodeUnknownTopic, Message: "no topic t", LogStartOffset: -1, HighWatermark: -1},
			sentinel: ErrUnknownTopic,
		},
		{
			name: "not leader names it", status: 409,
			body: `{"error":{"code":"not_leader","message":"m","retriable":true,"leader":"n2","leader_address":"10.0.0.2:7070"}}`,
			want: Error{Status: 409, Code: CodeNotLeader, Message: "m", Retriable: true, Leader: "n2", LeaderAddress: "10.0.0.2:7070",
				LogStartOffset: -1, HighWatermark: -1},
			retriable: true,
		},
		{
			name: "not JSON", status: 502, body: "<html>bad gateway</html>\n",
			want: Error{Status: 502, Message: "<html>bad gateway</html>", LogStartOffset: -1, HighWatermark: -1},
		},
		{
			name: "empty body", status: 500,
			want: Error{Status: 500, Message: "Internal Server Error", LogStartOffset: -1, HighWatermark: -1},
		},
		{
			name: "bad Retry-After ignored", status: 503, retryAfter: "soon",
			body:     `{"error":{"code":"leader_not_available","message":"m","retriable":true}}`,
			want:     Error{Status: 503, Code: CodeLeaderNotAvailable, Message: "m", Retriable: true, LogStartOffset: -1, HighWatermark: -1},
			sentinel: ErrLeaderNotAvailable, retriable: true,
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if c.retryAfter != "" {
					w.Header().Set("Retry-After", c.retryAfter)
				}
				w.WriteHeader(c.status)
				_, _ = w.Write([]byte(c.body))
			}))
			defer srv.Close()
			cl, err := New(srv.URL)
			if err != nil {
				t.Fatal(err)
			}
			_, err = cl.DescribeTopic(context.Background(), "t")
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("error %v (%T) is not an *Error", err, err)
			}
			if *e != c.want {
				t.Fatalf("decoded %+v\nwant    %+v", *e, c.want)
			}
			if c.sentinel != nil && !errors.Is(err, c.sentinel) {
				t.Errorf("errors.Is(%v, %v) = false", err, c.sentinel)
			}
			if errors.Is(err, ErrTopicExists) {
				t.Errorf("%v matches an unrelated sentinel", err)
			}
			if IsRetriable(err) != c.retriable {
				t.Errorf("IsRetriable = %v, want %v", IsRetriable(err), c.retriable)
			}
			if !strings.HasPrefix(err.Error(), `describe topic "t": client: `) {
				t.Errorf("message %q lacks its context", err)
			}
		})
	}
}

func TestIsRetriable(t *testing.T) {
	retriable503 := &Error{Status: 503, Code: CodeLeaderNotAvailable, Retriable: true}
	cases := []struct {
		name string
		err  error
		want bool
	}{
		{"nil", nil, false},
		{"agent says retriable", retriable503, true},
		{"agent says not", &Error{Status: 400, Code: CodeInvalidRequest}, false},
		{"unreachable agent", &transportError{err: errors.New("connection refused")}, true},
		{"outcome unknown wrapping a retriable error", &OutcomeUnknownError{Cause: retriable503}, false},
		{"closed", ErrClosed, false},
		{"deadline", context.DeadlineExceeded, false},
	}
	for _, c := range cases {
		if got := IsRetriable(c.err); got != c.want {
			t.Errorf("%s: IsRetriable(%v) = %v, want %v", c.name, c.err, got, c.want)
		}
	}
}

func TestTopics(t *testing.T) {
	f := newFakeAgent(t)
	c := f.newClient()
	ctx := testContext(t)

	if err := c.CreateTopic(ctx, TopicSpec{Name: "orders", Partitions: 2, ReplicationFactor: 3, MinInsyncReplicas: 2}); err != nil {
		t.Fatal(err)
	}
	err := c.CreateTopic(ctx, TopicSpec{Name: "orders"})
	if !errors.Is(err, ErrTopicExists) {
		t.Fatalf("second create: %v, want ErrTopicExists", err)
	}
	info, err := c.DescribeTopic(ctx, "orders")
	if err != nil {
		t.Fatal(err)
	}
	if info.Name != "orders" || len(info.Partitions) != 2 || info.Partitions[1].Partition != 1 ||
		info.Partitions[0].Leader != "n1" || len(info.Partitions[0].ISR) != 2 || string(info.Config["min_insync_replicas"]) != "2" {
		t.Fatalf("describe: %+v", info)
	}
	topics, err := c.ListTopics(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(topics) != 1 || topics[0].Name != "orders" {
		t.Fatalf("list: %+v", topics)
	}
	if err := c.DeleteTopic(ctx, "orders"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.DescribeTopic(ctx, "orders"); !errors.Is(err, ErrUnknownTopic) {
		t.Fatalf("describe after delete: %v, want ErrUnknownTopic", err)
	}
	if err := c.DeleteTopic(ctx, "orders"); !errors.Is(err, ErrUnknownTopic) {
		t.Fatalf("delete twice: %v, want ErrUnknownTopic", err)
	}
	if h, err := c.Health(ctx); err != nil || h.NodeID != "n1" {
		t.Fatalf("health: %+v, %v", h, err)
	}
}

func TestTopicNameCheckedBeforeAnyRequest(t *testing.T) {
	f := newFakeAgent(t)
	c := f.newClient()
	ctx := testContext(t)
	for _, name := range []string{"", ".", "..", "a/b", "sp ace", strings.Repeat("x", 250), "é"} {
		if err := c.CreateTopic(ctx, TopicSpec{Name: name}); !errors.Is(err, ErrInvalidTopicName) {
			t.Errorf("create %q: %v", name, err)
		}
		if _, err := c.DescribeTopic(ctx, name); !errors.Is(err, ErrInvalidTopicName) {
			t.Errorf("describe %q: %v", name, err)
		}
		if _, err := c.NewProducer(name); !errors.Is(err, ErrInvalidTopicName) {
			t.Errorf("producer %q: %v", name, err)
		}
	}
	for _, name := range []string{"a", "A.b_c-9", strings.Repeat("x", 249), "..."} {
		if err := ValidateTopicName(name); err != nil {
			t.Errorf("%q: %v", name, err)
		}
	}
	if len(f.produceCalls()) != 0 || len(f.topics) != 0 {
		t.Fatal("an invalid name reached the agent")
	}
}

func TestDecodeTopicList(t *testing.T) {
	cases := []struct {
		name, body string
		want       []string
		partitions []int // per topic; -1 when not described
		wantErr    bool
	}{
		{"object of names", `{"topics":["a","b"]}`, []string{"a", "b"}, []int{-1, -1}, false},
		{"array of names", `["a"]`, []string{"a"}, []int{-1}, false},
		{"object of descriptions", `{"topics":[{"name":"a","partitions":[{"partition":0}]}]}`, []string{"a"}, []int{1}, false},
		{"array of descriptions", ` [{"name":"a","partitions":[]},"b"]`, []string{"a", "b"}, []int{0, -1}, false},
		{"empty", `{"topics":[]}`, nil, nil, false},
		{"no topics key", `{"items":[]}`, nil, nil, true},
		{"nameless", `[{"partitions":[]}]`, nil, nil, true},
		{"not JSON", `topics: a`, nil, nil, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := decodeTopicList([]byte(c.body))
			if (err != nil) != c.wantErr {
				t.Fatalf("err = %v, want error %v", err, c.wantErr)
			}
			if len(got) != len(c.want) {
				t.Fatalf("got %+v, want %v", got, c.want)
			}
			for i := range got {
				n := -1
				if got[i].Partitions != nil {
					n = len(got[i].Partitions)
				}
				if got[i].Name != c.want[i] || n != c.partitions[i] {
					t.Errorf("topic %d = %+v, want %s with %d partitions", i, got[i], c.want[i], c.partitions[i])
				}
			}
		})
	}
}

// TestPartitionPositionsAbsent: the agent leaves a partition's positions
// out where it holds no replica; they decode as -1, not as an empty log.
func TestPartitionPositionsAbsent(t *testing.T) {
	var info TopicInfo
	body := `{"name":"t","partitions":[{"partition":0,"leader":"n2","replicas":["n2"],"isr":["n2"]},` +
		`{"partition":1,"leader":"n1","high_watermark":0,"log_start_offset":0,"log_end_offset":3}]}`
	if err := json.Unmarshal([]byte(body), &info); err != nil {
		t.Fatal(err)
	}
	absent, held := info.Partitions[0], info.Partitions[1]
	if absent.HighWatermark != -1 || absent.LogStartOffset != -1 || absent.LogEndOffset != nil || absent.Leader != "n2" {
		t.Errorf("partition without a replica here: %+v, want HW and log start -1", absent)
	}
	if held.HighWatermark != 0 || held.LogStartOffset != 0 || held.LogEndOffset == nil || *held.LogEndOffset != 3 {
		t.Errorf("partition with a replica here: %+v, want HW 0, log start 0, LEO 3", held)
	}
}

func TestPartitionForKey(t *testing.T) {
	// FNV-1a 32-bit reference values (the FNV specification's test
	// vectors): the agent must compute the same.
	vectors := []struct {
		key  string
		hash uint32
	}{
		{"", 0x811c9dc5},
		{"a", 0xe40c292c},
		{"foobar", 0xbf9cf968},
	}
	for _, v := range vectors {
		for _, n := range []int{1, 2, 3, 7, 1000, 1 << 31} {
			if got, want := PartitionForKey([]byte(v.key), n), int(v.hash%uint32(n)); got != want {
				t.Errorf("PartitionForKey(%q, %d) = %d, want %d", v.key, n, got, want)
			}
		}
	}
	// Keys spread: 3000 distinct keys over 3 partitions.
	rng := testseed.Rand(t)
	counts := make([]int, 3)
	for i := range 3000 {
		key := []byte("user-" + string(rune('a'+i%26)) + "-" + time.Duration(rng.Int64()).String())
		p := PartitionForKey(key, 3)
		if p != PartitionForKey(key, 3) {
			t.Fatalf("key %q is not stable", key)
		}
		counts[p]++
	}
	for p, n := range counts {
		if n < 800 || n > 1200 {
			t.Errorf("partition %d got %d of 3000 keys: %v", p, n, counts)
		}
	}
	defer func() {
		if recover() == nil {
			t.Error("PartitionForKey(key, 0) did not panic")
		}
	}()
	PartitionForKey([]byte("k"), 0)
}

func TestBackoffDelay(t *testing.T) {
	b := backoff{min: 50 * time.Millisecond, max: time.Second}
	cases := []struct {
		name       string
		jitter     func(int64) int64
		attempt    int
		retryAfter time.Duration
		want       time.Duration
	}{
		{"first, no jitter", func(int64) int64 { return 0 }, 0, 0, 25 * time.Millisecond},
		{"first, full jitter", func(n int64) int64 { return n - 1 }, 0, 0, 50 * time.Millisecond},
		{"doubles", func(int64) int64 { return 0 }, 3, 0, 200 * time.Millisecond},
		{"capped", func(n int64) int64 { return n - 1 }, 10, 0, time.Second},
		{"huge attempt capped", func(n int64) int64 { return n - 1 }, 200, 0, time.Second},
		{"Retry-After is a floor", func(int64) int64 { return 0 }, 0, 700 * time.Millisecond, 700 * time.Millisecond},
		{"Retry-After capped", func(int64) int64 { return 0 }, 0, 5 * time.Second, time.Second},
	}
	for _, c := range cases {
		b.jitter = c.jitter
		if got := b.delay(c.attempt, c.retryAfter); got != c.want {
			t.Errorf("%s: delay(%d, %v) = %v, want %v", c.name, c.attempt, c.retryAfter, got, c.want)
		}
	}
}

// TestTokenAndTLS: WithToken puts the bearer token on every request,
// WithTLSConfig is what verifies an https agent, and a 401 is
// ErrUnauthorized.
func TestTokenAndTLS(t *testing.T) {
	var mu sync.Mutex
	var seen []string
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.Header.Get("Authorization"))
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		if r.Header.Get("Authorization") != "Bearer s3cret" {
			w.WriteHeader(http.StatusUnauthorized)
			w.Write([]byte(`{"error":{"code":"unauthorized","message":"client API requests need the token","retriable":false}}`))
			return
		}
		w.Write([]byte(`{"topics":["a"]}`))
	}))
	defer srv.Close()
	roots := x509.NewCertPool()
	roots.AddCert(srv.Certificate())
	ctx := context.Background()

	c, err := New(srv.URL, WithToken("s3cret"), WithTLSConfig(&tls.Config{RootCAs: roots}))
	if err != nil {
		t.Fatal(err)
	}
	if topics, err := c.ListTopics(ctx); err != nil || len(topics) != 1 || topics[0].Name != "a" {
		t.Fatalf("ListTopics = %v, %v", topics, err)
	}

	wrong, err := New(srv.URL, WithToken("guess"), WithTLSConfig(&tls.Config{RootCAs: roots}))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := wrong.ListTopics(ctx); !errors.Is(err, ErrUnauthorized) || IsRetriable(err) {
		t.Fatalf("wrong token: %v, want ErrUnauthorized, not retriable", err)
	}

	untrusting, err := New(srv.URL, WithToken("s3cret"))
	if err != nil {
		t.Fatal(err)
	}
	var unknownAuthority x509.UnknownAuthorityError
	if _, err := untrusting.ListTopics(ctx); !errors.As(err, &unknownAuthority) {
		t.Fatalf("without the agent's CA: %v, want x509.UnknownAuthorityError", err)
	}
	mu.Lock()
	if want := []string{"Bearer s3cret", "Bearer guess"}; !slices.Equal(seen, want) {
		t.Errorf("Authorization headers %q, want %q", seen, want)
	}
	mu.Unlock()

	if _, err := New(srv.URL, WithTLSConfig(&tls.Config{}), WithHTTPClient(http.DefaultClient)); !errors.Is(err, ErrInvalidOption) {
		t.Errorf("WithTLSConfig with WithHTTPClient = %v, want ErrInvalidOption", err)
	}
}
