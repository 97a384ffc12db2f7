package testcluster

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"math/big"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/logagent/logagent/client"
	"github.com/logagent/logagent/internal/pki"
	"github.com/logagent/logagent/internal/testseed"
	"github.com/logagent/logagent/wire"
)

// tlsClient is an HTTPS client of the agents that trusts ca and presents
// cert (none when nil), on a new connection for every request, so each
// request sees what the agent serves at that moment.
func tlsClient(ca *pki.CA, cert *pki.Leaf) *http.Client {
	roots := x509.NewCertPool()
	roots.AddCert(ca.Cert)
	cfg := &tls.Config{RootCAs: roots}
	if cert != nil {
		pair, err := tls.X509KeyPair(cert.CertPEM, cert.KeyPEM)
		if err != nil {
			panic(err) // pki made it: cannot fail
		}
		// Presented whatever CAs the server names: crypto/tls would keep
		// a certificate of another CA to itself.
		cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &pair, nil }
	}
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: cfg, DisableKeepAlives: true}}
}

// getWith sends GET url with an optional bearer token and returns the
// status, the error code of a JSON error, and the transport error.
func getWith(hc *http.Client, url, token string) (int, string, error) {
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		return 0, "", err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, "", err
	}
	code := ""
	if resp.StatusCode >= 300 {
		var apiErr *APIError
		if errors.As(decodeAPIError(resp.StatusCode, b), &apiErr) {
			code = apiErr.Code
		}
	}
	return resp.StatusCode, code, nil
}

// servedSerial is the serial of the certificate the agent's peer listener
// presents to a new connection.
func servedSerial(t *testing.T, addr string, ca *pki.CA, cert *pki.Leaf) *big.Int {
	t.Helper()
	serial, err := tryServedSerial(addr, ca, cert)
	if err != nil {
		t.Fatal(err)
	}
	return serial
}

// tryServedSerial is servedSerial for a poll: until an agent has reloaded a
// certificate of a new CA, the handshake that trusts only that CA fails,
// and the poll looks again.
func tryServedSerial(addr string, ca *pki.CA, cert *pki.Leaf) (*big.Int, error) {
	roots := x509.NewCertPool()
	roots.AddCert(ca.Cert)
	pair, err := tls.X509KeyPair(cert.CertPEM, cert.KeyPEM)
	if err != nil {
		return nil, err
	}
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr,
		&tls.Config{RootCAs: roots, ServerName: "127.0.0.1", Certificates: []tls.Certificate{pair}})
	if err != nil {
		return nil, fmt.Errorf("TLS handshake with %s: %w", addr, err)
	}
	defer conn.Close()
	return conn.ConnectionState().PeerCertificates[0].SerialNumber, nil
}

// plaintextAnswer sends an HTTP request in the clear to addr and returns
// whatever comes back before the connection ends.
func plaintextAnswer(t *testing.T, addr string) []byte {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(conn, "GET /v1/health HTTP/1.1\r\nHost: "+addr+"\r\n\r\n"); err != nil {
		return nil
	}
	b, _ := io.ReadAll(conn)
	return b
}

func issue(t *testing.T, ca *pki.CA, name string) *pki.Leaf {
	t.Helper()
	leaf, err := ca.Issue(name, time.Now(), "127.0.0.1", "localhost")
	if err != nil {
		t.Fatal(err)
	}
	return leaf
}

// produceAll writes n one-record batches acks=all through a and returns the
// values in offset order.
func produceAll(t *testing.T, a *Agent, topic string, n int, tag string) []string {
	t.Helper()
	var values []string
	for i := range n {
		v := fmt.Sprintf("%s-%d", tag, i)
		if _, err := a.Produce(topic, 0, ContentTypeBatch, buildBatch(t, [][]byte{[]byte(v)}), "all", 10*time.Second); err != nil {
			t.Fatalf("produce %s through %s: %v", v, a.NodeID, err)
		}
		values = append(values, v)
	}
	return values
}

// checkReplicated waits until every replica holds hw records and checks
// that their logs are identical and hold want, in order, and the ISR is
// full.
func checkReplicated(t *testing.T, c *Cluster, topic string, want []string) {
	t.Helper()
	hw := int64(len(want))
	waitReplicasAt(t, c, topic, 0, hw, 20*time.Second)
	c.WaitISR(topic, 0, []string{"n1", "n2", "n3"}, 20*time.Second)
	got := decodeRecords(t, compareReplicas(t, c.Agents, topic, 0, hw))
	for i, v := range want {
		if string(got[int64(i)]) != v {
			t.Fatalf("%s offset %d holds %q, want %q", topic, i, got[int64(i)], v)
		}
	}
}

// TestPeerTLS is issue 16's acceptance 3 with the reload: agents with
// mutual TLS (and the peer token) replicate; the peer port refuses
// certificates of another CA, connections without one, plaintext, and
// requests without the token; a SIGHUP'd agent serves its renewed
// certificate to new connections and, after a change of CA on every agent,
// the cluster replicates a new topic over the new certificates.
func TestPeerTLS(t *testing.T) {
	const token = "peer-s3cret"
	c := Start(t, Options{Security: Security{PeerTLS: true, PeerToken: token}})
	leader, _ := createReplicatedTopic(t, c, "tls")
	follower := otherAgent(t, c, leader)

	// Through the leader, and forwarded by a follower's sidecar.
	var written []string
	replicate := func(t *testing.T) {
		written = append(written, produceAll(t, leader, "tls", 20, "direct")...)
		written = append(written, produceAll(t, follower, "tls", 20, "forwarded")...)
		checkReplicated(t, c, "tls", written)
	}
	t.Run("replication", replicate)

	operator := issue(t, c.CA, "operator")
	healthURL := "https://" + leader.PeerAddr + "/v1/health"
	t.Run("valid certificate and token", func(t *testing.T) {
		status, code, err := getWith(tlsClient(c.CA, operator), healthURL, token)
		if err != nil || status != http.StatusOK {
			t.Fatalf("GET /v1/health = %d %s, %v; want 200", status, code, err)
		}
	})

	t.Run("certificate of another CA refused", func(t *testing.T) {
		rogueCA, err := pki.NewCA("rogue CA", time.Now())
		if err != nil {
			t.Fatal(err)
		}
		status, code, err := getWith(tlsClient(c.CA, issue(t, rogueCA, "n1")), healthURL, token)
		if err == nil || !strings.Contains(err.Error(), "tls: unknown certificate authority") {
			t.Fatalf("with a certificate of another CA: %d %s, %v; want the handshake refused", status, code, err)
		}
	})

	t.Run("no client certificate refused", func(t *testing.T) {
		status, code, err := getWith(tlsClient(c.CA, nil), healthURL, token)
		if err == nil || !strings.Contains(err.Error(), "tls: certificate required") {
			t.Fatalf("without a client certificate: %d %s, %v; want the handshake refused", status, code, err)
		}
	})

	t.Run("plaintext refused", func(t *testing.T) {
		if b := plaintextAnswer(t, leader.PeerAddr); bytes.Contains(b, []byte("HTTP/")) {
			t.Fatalf("plaintext request to the TLS peer port answered: %q", b)
		}
		if _, err := http.Get("http://" + leader.PeerAddr + "/v1/health"); err == nil {
			t.Fatal("net/http got an answer in the clear from the TLS peer port")
		}
	})

	t.Run("no token", func(t *testing.T) {
		hc := tlsClient(c.CA, operator)
		q := fmt.Sprintf("?topic=tls&partition=0&replica_id=%s&fetch_offset=0&current_leader_epoch=1&last_fetched_epoch=-1&high_watermark=0&max_bytes=1024&max_wait_ms=0", follower.NodeID)
		fetchURL := "https://" + leader.PeerAddr + "/v1/replica/fetch" + q
		for _, tok := range []string{"", "guess"} {
			status, code, err := getWith(hc, fetchURL, tok)
			if err != nil || status != http.StatusUnauthorized || code != wire.CodeUnauthorized {
				t.Fatalf("replica fetch with token %q: %d %s, %v; want 401 unauthorized", tok, status, code, err)
			}
		}
		resp, err := hc.Get(fetchURL)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if got := resp.Header.Get("WWW-Authenticate"); got != `Bearer realm="logagent peer API"` {
			t.Errorf("401 without the token: WWW-Authenticate %q, want the Bearer challenge", got)
		}
		// Health is the exception: probes carry no token (the certificate
		// is still required, above).
		status, code, err := getWith(hc, healthURL, "")
		if err != nil || status != http.StatusOK {
			t.Fatalf("health without the token: %d %s, %v; want 200", status, code, err)
		}
	})

	t.Run("reload on SIGHUP", func(t *testing.T) {
		before := servedSerial(t, leader.PeerAddr, c.CA, operator)
		renewed := leader.IssueCert()
		if before.Cmp(renewed.Cert.SerialNumber) == 0 {
			t.Fatal("the renewed certificate has the old serial")
		}
		leader.Reload()
		c.WaitFor(10*time.Second, "the renewed certificate served", func() bool {
			return servedSerial(t, leader.PeerAddr, c.CA, operator).Cmp(renewed.Cert.SerialNumber) == 0
		})
		waitLog(t, leader, "reload: TLS certificate loaded: listener=peer", renewed.Cert.SerialNumber.Text(16))
		replicate(t)

		// A certificate file that does not parse: the configuration is
		// invalid, the reload changes nothing.
		if err := os.WriteFile(leader.CertFile, []byte("-----BEGIN CERTIFICATE-----\nbroken\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		leader.Reload()
		waitLog(t, leader, "reload: configuration invalid; keeping the running one")
		if b, err := os.ReadFile(leader.LogPath()); err != nil || !bytes.Contains(b, []byte("Invalid peer.tls.cert_file")) {
			t.Fatalf("the failed reload's log does not name peer.tls.cert_file (%v)", err)
		}
		if got := servedSerial(t, leader.PeerAddr, c.CA, operator); got.Cmp(renewed.Cert.SerialNumber) != 0 {
			t.Fatalf("after a failed reload the agent serves serial %x, want %x", got, renewed.Cert.SerialNumber)
		}

		// A new CA on every agent, all reloaded: connections made from
		// now on need certificates of the new CA on both sides. A new
		// topic's followers open new connections to its leader.
		next, err := pki.NewCA("next CA", time.Now())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := next.WriteCA(filepath.Dir(c.CAFile), "ca"); err != nil {
			t.Fatal(err)
		}
		c.CA = next
		serials := map[*Agent]*big.Int{}
		for _, a := range c.Agents {
			serials[a] = a.IssueCert().Cert.SerialNumber
			a.Reload()
		}
		nextOperator := issue(t, next, "operator")
		for _, a := range c.Agents {
			c.WaitFor(10*time.Second, a.NodeID+" serving its certificate of the new CA", func() bool {
				serial, err := tryServedSerial(a.PeerAddr, next, nextOperator)
				return err == nil && serial.Cmp(serials[a]) == 0
			})
		}
		if _, _, err := getWith(tlsClient(next, operator), healthURL, token); err == nil {
			t.Fatal("a client certificate of the old CA was accepted after the change of CA")
		}
		newLeader, _ := createReplicatedTopic(t, c, "tls-next-ca")
		want := append(produceAll(t, newLeader, "tls-next-ca", 20, "direct"), produceAll(t, otherAgent(t, c, newLeader), "tls-next-ca", 20, "forwarded")...)
		checkReplicated(t, c, "tls-next-ca", want)
	})
}

// waitLog waits until the agent's log has a line holding every part.
func waitLog(t *testing.T, a *Agent, parts ...string) {
	t.Helper()
	a.c.WaitFor(10*time.Second, fmt.Sprintf("%s logging %q", a.NodeID, parts), func() bool {
		b, err := os.ReadFile(a.LogPath())
		if err != nil {
			return false
		}
		for _, line := range strings.Split(string(b), "\n") {
			all := true
			for _, p := range parts {
				all = all && strings.Contains(line, p)
			}
			if all {
				return true
			}
		}
		return false
	})
}

// TestClientTLSAndToken: a client API with TLS, client certificates and a
// token refuses connections without a certificate of the CA, plaintext,
// and requests without the token (401, the health check excepted), and
// with them serves everything, fetches included: the body that leaves
// through the TLS writer instead of sendfile is byte for byte the log, with
// its Content-Length, served by the leader, by an in-sync follower and
// through another agent's fetch proxy (which presents its peer
// certificate). The Go client and the CLI work against it with the token,
// the CA and a client certificate.
func TestClientTLSAndToken(t *testing.T) {
	const token = "client-s3cret"
	c := Start(t, Options{Security: Security{PeerTLS: true, ClientTLS: true, ClientCerts: true, ClientToken: token}})
	leader, _ := createReplicatedTopic(t, c, "ctls")
	follower := otherAgent(t, c, leader)
	hc := tlsClient(c.CA, c.ClientCert)
	base := "https://" + leader.ClientAddr

	t.Run("client certificate required", func(t *testing.T) {
		rogueCA, err := pki.NewCA("rogue CA", time.Now())
		if err != nil {
			t.Fatal(err)
		}
		for name, cert := range map[string]*pki.Leaf{"none": nil, "of another CA": issue(t, rogueCA, "app")} {
			if status, _, err := getWith(tlsClient(c.CA, cert), base+"/v1/health", token); err == nil {
				t.Fatalf("client certificate %s: answered %d, want the handshake refused", name, status)
			}
		}
	})

	t.Run("without the token", func(t *testing.T) {
		for _, path := range []string{"/v1/topics", "/v1/status", "/v1/topics/ctls", "/v1/topics/ctls/partitions/0/records?offset=0"} {
			for _, tok := range []string{"", "guess"} {
				status, code, err := getWith(hc, base+path, tok)
				if err != nil || status != http.StatusUnauthorized || code != wire.CodeUnauthorized {
					t.Fatalf("GET %s with token %q: %d %s, %v; want 401 unauthorized", path, tok, status, code, err)
				}
			}
		}
		req, err := http.NewRequest(http.MethodPost, base+"/v1/topics/ctls/records?partition=0", strings.NewReader("x\n"))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", ContentTypeNDJSON)
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized || !strings.HasPrefix(resp.Header.Get("WWW-Authenticate"), "Bearer") {
			t.Fatalf("produce without the token: %d (WWW-Authenticate %q), want 401 with a Bearer challenge", resp.StatusCode, resp.Header.Get("WWW-Authenticate"))
		}
		if status, _, err := getWith(hc, base+"/v1/health", ""); err != nil || status != http.StatusOK {
			t.Fatalf("health without the token: %d, %v; want 200 (exempt)", status, err)
		}
		// The status page's files are open (a browser sends no token by
		// itself); its state, like the rest, needs the token.
		for _, path := range []string{"/ui/", "/ui/app.js", "/ui/style.css"} {
			if status, _, err := getWith(hc, base+path, ""); err != nil || status != http.StatusOK {
				t.Fatalf("GET %s without the token: %d, %v; want 200 (the page's files are open)", path, status, err)
			}
		}
		if status, code, err := getWith(hc, base+"/ui/api/state", ""); err != nil || status != http.StatusUnauthorized || code != wire.CodeUnauthorized {
			t.Fatalf("GET /ui/api/state without the token: %d %s, %v; want 401 unauthorized", status, code, err)
		}
		if status, _, err := getWith(hc, base+"/ui/api/state", token); err != nil || status != http.StatusOK {
			t.Fatalf("GET /ui/api/state with the token: %d, %v; want 200", status, err)
		}
	})

	t.Run("plaintext refused", func(t *testing.T) {
		if b := plaintextAnswer(t, leader.ClientAddr); bytes.Contains(b, []byte("HTTP/")) {
			t.Fatalf("plaintext request to the TLS client port answered: %q", b)
		}
	})

	t.Run("fetch over TLS", func(t *testing.T) {
		// Batches of 64 KiB: over 8 KiB, the size at which a plaintext
		// answer would leave with sendfile.
		rng := rand.New(rand.NewPCG(testseed.Seed(t), 16))
		for i := range 16 {
			if _, err := leader.Produce("ctls", 0, ContentTypeBatch, buildBatch(t, valuesOf(rng, 0, i*64, 64, 1024)), "all", 10*time.Second); err != nil {
				t.Fatal(err)
			}
		}
		const hw = 16 * 64
		waitReplicasAt(t, c, "ctls", 0, hw, 20*time.Second)
		want, err := LogBytesBelow(leader.PartitionDir("ctls", 0), hw)
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range []*Agent{leader, follower} {
			got := fetchChecked(t, hc, "https://"+a.ClientAddr+"/v1/topics/ctls/partitions/0/records?offset=0&max_bytes=8388608", token)
			if !bytes.Equal(got, want) {
				t.Fatalf("fetch from %s over TLS: %d bytes, differ from the log's %d", a.NodeID, len(got), len(want))
			}
		}

		// One replica, so the other agents proxy the fetch to its
		// leader's client API: over TLS, with the token.
		if err := c.Agents[0].CreateTopic(TopicSpec{Name: "ctls-one", Partitions: 1, ReplicationFactor: 1, MinInsyncReplicas: 1}); err != nil {
			t.Fatal(err)
		}
		only, _ := c.WaitLeader("ctls-one", 0, 20*time.Second)
		if _, err := only.Produce("ctls-one", 0, ContentTypeBatch, buildBatch(t, valuesOf(rng, 1, 0, 64, 1024)), "all", 10*time.Second); err != nil {
			t.Fatal(err)
		}
		want, err = LogBytesBelow(only.PartitionDir("ctls-one", 0), 64)
		if err != nil {
			t.Fatal(err)
		}
		proxy := otherAgent(t, c, only)
		got := fetchChecked(t, hc, "https://"+proxy.ClientAddr+"/v1/topics/ctls-one/partitions/0/records?offset=0", token)
		if !bytes.Equal(got, want) {
			t.Fatalf("fetch proxied by %s from %s: %d bytes, differ from the log's %d", proxy.NodeID, only.NodeID, len(got), len(want))
		}
	})

	t.Run("go client", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		noToken, err := client.New(base, client.WithTLSConfig(c.ClientTLSConfig()))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := noToken.ListTopics(ctx); !errors.Is(err, client.ErrUnauthorized) {
			t.Fatalf("Go client without the token: %v, want ErrUnauthorized", err)
		}
		cl, err := client.New(base, client.WithToken(token), client.WithTLSConfig(c.ClientTLSConfig()))
		if err != nil {
			t.Fatal(err)
		}
		if err := cl.CreateTopic(ctx, client.TopicSpec{Name: "ctls-go", Partitions: 1, ReplicationFactor: 3, MinInsyncReplicas: 2}); err != nil {
			t.Fatal(err)
		}
		c.WaitLeader("ctls-go", 0, 20*time.Second)
		p, err := cl.NewProducer(client.WithDefaultTopic("ctls-go"))
		if err != nil {
			t.Fatal(err)
		}
		const n = 200
		for i := range n {
			if _, err := p.Produce(ctx, client.Message{Value: []byte("v" + strconv.Itoa(i)), Partition: client.ToPartition(0)}); err != nil {
				t.Fatal(err)
			}
		}
		if err := p.Close(ctx); err != nil {
			t.Fatal(err)
		}
		cons, err := cl.NewConsumer("ctls-go", 0, client.OffsetEarliest)
		if err != nil {
			t.Fatal(err)
		}
		for i := range n {
			r, err := cons.Next(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if r.Offset != int64(i) || string(r.Value) != "v"+strconv.Itoa(i) {
				t.Fatalf("record %d: offset %d value %q", i, r.Offset, r.Value)
			}
		}
	})

	t.Run("cli", func(t *testing.T) {
		tokenFile := filepath.Join(t.TempDir(), "token")
		if err := os.WriteFile(tokenFile, []byte(token+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		addr := "https://" + follower.ClientAddr
		tlsFlags := []string{"-addr", addr, "-ca-file", c.CAFile, "-cert-file", c.ClientCertFile, "-key-file", c.ClientKeyFile}
		runCLI(t, "one\ntwo\n", append([]string{"produce", "-token-file", tokenFile, "-topic", "ctls-one", "-partition", "0"}, tlsFlags...)...)
		out := runCLI(t, "", append([]string{"consume", "-token-file", tokenFile, "-topic", "ctls-one", "-partition", "0", "-from", "64"}, tlsFlags...)...)
		if out != "one\ntwo\n" {
			t.Fatalf("consume over TLS with the token: %q", out)
		}
		t.Setenv("LOGAGENT_TOKEN", token)
		if out := runCLI(t, "", append([]string{"topic", "list"}, tlsFlags...)...); !strings.Contains(out, "ctls-one") {
			t.Fatalf("topic list with $LOGAGENT_TOKEN: %q", out)
		}
	})
}

// fetchChecked GETs a fetch answer and checks that its body is as long as
// its Content-Length says.
func fetchChecked(t *testing.T, hc *http.Client, url, token string) []byte {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Accept", ContentTypeBatch)
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("fetch %s: body: %v", url, err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("fetch %s: %d %s", url, resp.StatusCode, body)
	}
	if resp.ContentLength != int64(len(body)) || resp.Header.Get("Content-Length") != strconv.Itoa(len(body)) {
		t.Fatalf("fetch %s: Content-Length %q for %d bytes", url, resp.Header.Get("Content-Length"), len(body))
	}
	return body
}
