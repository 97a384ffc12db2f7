package election

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
)

func TestConsulErrorNamesMissingPermission(t *testing.T) {
	tests := []struct {
		name   string
		err    error
		denied bool
	}{
		{name: "status 403", err: api.StatusError{Code: 403, Body: "Permission denied: token lacks 'key:write'"}, denied: true},
		{name: "renew 403", err: errors.New("Unexpected response code: 403"), denied: true},
		{name: "txn body", err: errors.New("Failed request: Permission denied"), denied: true},
		{name: "bad token", err: api.StatusError{Code: 403, Body: "ACL not found"}, denied: true},
		{name: "status 500", err: api.StatusError{Code: 500, Body: "boom"}},
		{name: "refused", err: errors.New("dial tcp 127.0.0.1:1: connect: connection refused")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := consulError(tt.err, "create session", sessionRule)
			var perm *PermissionError
			if got := errors.As(err, &perm); got != tt.denied {
				t.Fatalf("consulError(%v) = %v; permission error %v, want %v", tt.err, err, got, tt.denied)
			}
			if tt.denied {
				if !errors.Is(err, ErrPermissionDenied) || perm.Rule != sessionRule {
					t.Fatalf("%v: not ErrPermissionDenied or wrong rule %q", err, perm.Rule)
				}
				want := fmt.Sprintf("the token needs %s", sessionRule)
				if msg := err.Error(); !strings.Contains(msg, want) || !strings.Contains(msg, "create session") {
					t.Fatalf("message %q does not name the operation and %q", msg, want)
				}
				return
			}
			if !errors.Is(err, tt.err) {
				t.Fatalf("%v does not wrap %v", err, tt.err)
			}
		})
	}
}

func TestConfigDefaultsAndValidation(t *testing.T) {
	base := Config{NodeID: "n1", Consul: &api.Config{Address: "127.0.0.1:1"}}
	got, err := base.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	if got.CheckTTL != DefaultCheckTTL || got.SessionTTL != DefaultSessionTTL || got.LockDelay != DefaultLockDelay ||
		got.Prefix != DefaultPrefix || got.LeaseMargin != DefaultLeaseMargin {
		t.Fatalf("defaults not applied: %+v", got)
	}
	tests := []struct {
		name   string
		mutate func(*Config)
	}{
		{name: "no node id", mutate: func(c *Config) { c.NodeID = "" }},
		{name: "node id with slash", mutate: func(c *Config) { c.NodeID = "a/b" }},
		{name: "prefix without slash", mutate: func(c *Config) { c.Prefix = "logagent" }},
		{name: "session ttl below consul minimum", mutate: func(c *Config) { c.SessionTTL = 500 * time.Millisecond }},
		{name: "lock delay above 60s", mutate: func(c *Config) { c.LockDelay = 61 * time.Second }},
		{name: "margin too large for the check", mutate: func(c *Config) { c.LeaseMargin = time.Second }},
		{name: "deregister below a minute", mutate: func(c *Config) { c.DeregisterCriticalAfter = 30 * time.Second }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := base
			tt.mutate(&cfg)
			if _, err := cfg.withDefaults(); !errors.Is(err, ErrInvalidConfig) {
				t.Fatalf("withDefaults() = %v, want ErrInvalidConfig", err)
			}
		})
	}
}
