package agent

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/hashicorp/go-hclog"

	"github.com/logagent/logagent/config"
	"github.com/logagent/logagent/election"
	"github.com/logagent/logagent/internal/consultest"
)

// TestConsulTokenFile: consul.token_file is how the agent authenticates to
// a Consul that enforces ACLs: with a token of the shipped least-privilege
// policy in the file, the agent registers and lists the agents; without
// it, registration is refused. No log line holds the token.
func TestConsulTokenFile(t *testing.T) {
	t.Setenv("CONSUL_HTTP_TOKEN", "")
	t.Setenv("CONSUL_HTTP_TOKEN_FILE", "")
	srv := consultest.Start(t, consultest.WithACL())
	rules, err := os.ReadFile("../election/acl-policy.hcl")
	if err != nil {
		t.Fatal(err)
	}
	policy, _, err := srv.Client().ACL().PolicyCreate(&api.ACLPolicy{Name: "logagent", Rules: string(rules)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	token, _, err := srv.Client().ACL().TokenCreate(&api.ACLToken{Policies: []*api.ACLTokenPolicyLink{{ID: policy.ID}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "consul-token")
	if err := os.WriteFile(tokenFile, []byte(token.SecretID+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}

	register := func(t *testing.T, consulHCL string) (string, error) {
		path := filepath.Join(t.TempDir(), "agent.hcl")
		body := fmt.Sprintf("node_id = \"n1\"\ndata_dir = %q\npeer { address = \"127.0.0.1:7171\" }\nconsul {\n  address = %q\n%s}\n", t.TempDir(), srv.HTTPAddr(), consulHCL)
		if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		cfg, err := config.Load(path)
		if err != nil {
			t.Fatal(err)
		}
		var logs strings.Builder
		coord, err := NewCoordinator(cfg, "", hclog.New(&hclog.LoggerOptions{Output: &logs, Level: hclog.Trace}))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if err := coord.WaitForConsul(ctx); err != nil {
			t.Fatal(err)
		}
		err = coord.Register(ctx)
		if err == nil {
			var agents []election.AgentInfo
			agents, err = coord.Agents(ctx)
			if err == nil && (len(agents) != 1 || agents[0].NodeID != "n1") {
				err = fmt.Errorf("agents %+v, want n1 alone", agents)
			}
		}
		// Closed before the log is read: its goroutines write to it.
		_ = coord.Close(ctx)
		return logs.String(), err
	}

	t.Run("with the token file", func(t *testing.T) {
		logs, err := register(t, fmt.Sprintf("  token_file = %q\n", tokenFile))
		if err != nil {
			t.Fatalf("register with consul.token_file: %v", err)
		}
		if strings.Contains(logs, token.SecretID) {
			t.Fatalf("the token is in the log:\n%s", logs)
		}
	})
	t.Run("without a token", func(t *testing.T) {
		if _, err := register(t, ""); err == nil || !strings.Contains(err.Error(), "permission denied") {
			t.Fatalf("register without a token: %v, want permission denied", err)
		}
	})
}
