package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/logagent/logagent/internal/pki"
)

// The tls group (issue 16): replication and fetch with TLS on both
// listeners, against the same workloads in the clear from the same run
// (produce-r3's rows and consume, run on the plaintext cluster whenever
// this group runs).

// tlsFiles are the certificate, key, CA and token files the TLS cluster's
// agents share (every agent listens on 127.0.0.1, so one certificate for
// that address serves all three).
type tlsFiles struct {
	dir                  string
	cert, key, ca, token string
}

func writeTLSFiles(dir string) (tlsFiles, error) {
	f := tlsFiles{dir: dir}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return f, fmt.Errorf("benchrun: %w", err)
	}
	now := time.Now()
	ca, err := pki.NewCA("benchrun CA", now)
	if err != nil {
		return f, err
	}
	leaf, err := ca.Issue("benchrun agent", now, "127.0.0.1", "localhost")
	if err != nil {
		return f, err
	}
	if f.ca, err = ca.WriteCA(dir, "ca"); err != nil {
		return f, err
	}
	if f.cert, f.key, err = leaf.Write(dir, "agent"); err != nil {
		return f, err
	}
	f.token = filepath.Join(dir, "token")
	if err := os.WriteFile(f.token, []byte("benchrun-token\n"), 0o600); err != nil {
		return f, fmt.Errorf("benchrun: %w", err)
	}
	return f, nil
}

// hcl turns on peer.tls, client.tls and both tokens.
func (f tlsFiles) hcl() string {
	return fmt.Sprintf(`peer {
  token_file = %[4]q
  tls {
    cert_file = %[1]q
    key_file  = %[2]q
    ca_file   = %[3]q
  }
}
client {
  token_file = %[4]q
  tls {
    cert_file = %[1]q
    key_file  = %[2]q
  }
}
`, f.cert, f.key, f.ca, f.token)
}

// tlsSetup is the TLS cluster's setup line, without machine-local paths.
const tlsSetup = "cluster: `bin/logagent dev -port-offset %d -config F` with F holding `storage { durability = \"replicated\" }`, " +
	"`peer { tls { cert_file, key_file, ca_file } token_file }` and `client { tls { cert_file, key_file } token_file }` " +
	"(one ECDSA P-256 certificate for 127.0.0.1 signed by a CA benchrun makes; the load generator gets -ca-file ca.pem -token-file token)"

// runLogagentTLS runs produce-r3's rows and the consume row against a dev
// cluster with TLS and tokens, keyed with a _tls suffix.
func (o *options) runLogagentTLS(ctx context.Context, res *results) {
	files, err := writeTLSFiles(filepath.Join(o.work, "tls"))
	if err != nil {
		o.note(res, "logagent TLS: %v", err)
		return
	}
	o.runLogagentWith(ctx, res, "replicated", files.hcl(), func(c *logagentCluster) {
		c.clientAddr = "https://" + strings.TrimPrefix(c.clientAddr, "http://")
		c.clientFlags = []string{"-ca-file", files.ca, "-token-file", files.token}
		c.setup = fmt.Sprintf(tlsSetup, o.portOffset)
		// The report names the files, not where this run kept them.
		c.hidePrefix = files.dir + string(filepath.Separator)
		for _, r := range produceRows {
			if r.group != "produce-r3" {
				continue
			}
			args := o.produceArgs(c, r)
			o.progress("logagent %s, over TLS", r.name)
			o.settle()
			o.logagentWarmup(ctx, res, c, args)
			res.logagent[r.topic()+"_tls"] = o.logagentSample(ctx, res, c, args)
		}
		o.progress("logagent consume, over TLS")
		o.settle()
		res.logagent["consume_tls"] = o.logagentSample(ctx, res, c, o.consumeArgs(c))
	})
}

// tlsRows compare each TLS figure with the plaintext one of the same run.
func tlsRows(res *results) []comparison {
	var rows []comparison
	for _, r := range produceRows {
		if r.group != "produce-r3" {
			continue
		}
		rows = append(rows, comparison{Group: "tls", Name: r.name + ", over TLS", TheirsName: "the same, plaintext",
			Ours: res.logagent[r.topic()+"_tls"], Theirs: res.logagent[r.topic()], Metric: byRecords})
	}
	return append(rows, comparison{Group: "tls", Name: "replay 1 KiB, RF 3, over TLS (no sendfile)", TheirsName: "the same, plaintext (sendfile)",
		Ours: res.logagent["consume_tls"], Theirs: res.logagent["consume"], Metric: byMB})
}
