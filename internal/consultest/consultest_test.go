package consultest

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
)

// alive reports whether a process with this pid still exists (a zombie
// counts as gone: Stop reaps it).
func alive(pid int) bool {
	return syscall.Kill(pid, 0) == nil
}

func TestDevServerServesAndStopsByPID(t *testing.T) {
	t.Parallel()
	var pid int
	var addr string
	t.Run("server", func(t *testing.T) {
		s := Start(t)
		pid, addr = s.PID(), s.HTTPAddr()
		if pid <= 0 {
			t.Fatalf("PID() = %d after Start", pid)
		}
		kv := s.Client().KV()
		if _, err := kv.Put(&api.KVPair{Key: "consultest/k", Value: []byte("v")}, nil); err != nil {
			t.Fatalf("put: %v", err)
		}
		pair, _, err := kv.Get("consultest/k", nil)
		if err != nil || pair == nil || string(pair.Value) != "v" {
			t.Fatalf("get = %v, %v; want v", pair, err)
		}
	})
	// The subtest's cleanup has run: the process must be gone and its port
	// closed.
	if alive(pid) {
		t.Fatalf("consul pid %d still running after the test ended", pid)
	}
	if conn, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		conn.Close()
		t.Fatalf("%s still accepts connections after the test ended", addr)
	}
}

func TestStopIsIdempotent(t *testing.T) {
	t.Parallel()
	s := Start(t, WithHCL(`node_meta { consultest = "extra hcl" }`))
	// The agent syncs its node meta to the catalog shortly after it is
	// ready.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		node, _, err := s.Client().Catalog().Node(s.NodeName(), nil)
		if err == nil && node != nil && node.Node.Meta["consultest"] == "extra hcl" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("node %+v, %v: the WithHCL fragment was not applied", node, err)
		}
	}
	pid := s.PID()
	s.Stop()
	s.Stop()
	if s.PID() != 0 {
		t.Fatalf("PID() = %d after Stop, want 0", s.PID())
	}
	if alive(pid) {
		t.Fatalf("consul pid %d still running after Stop", pid)
	}
}

func TestPersistentRestartKeepsData(t *testing.T) {
	t.Parallel()
	s := Start(t, Persistent())
	addr := s.HTTPAddr()
	kv := s.Client().KV()
	if _, err := kv.Put(&api.KVPair{Key: "consultest/durable", Value: []byte("kept")}, nil); err != nil {
		t.Fatalf("put: %v", err)
	}
	oldPID := s.PID()
	s.Restart()
	if s.HTTPAddr() != addr {
		t.Fatalf("address changed across restart: %s -> %s", addr, s.HTTPAddr())
	}
	if s.PID() == oldPID || alive(oldPID) {
		t.Fatalf("restart kept the old process %d (new %d)", oldPID, s.PID())
	}
	pair, _, err := kv.Get("consultest/durable", &api.QueryOptions{RequireConsistent: true})
	if err != nil || pair == nil || string(pair.Value) != "kept" {
		t.Fatalf("after restart get = %v, %v; want kept", pair, err)
	}
}

func TestACLDeniesAnonymousAndAllowsManagement(t *testing.T) {
	t.Parallel()
	s := Start(t, WithACL())
	if s.ManagementToken() == "" {
		t.Fatal("ManagementToken() empty in ACL mode")
	}
	if _, err := s.Client().KV().Put(&api.KVPair{Key: "consultest/acl", Value: []byte("x")}, nil); err != nil {
		t.Fatalf("management put: %v", err)
	}
	anonymous, err := api.NewClient(&api.Config{Address: s.HTTPAddr(), Scheme: "http"})
	if err != nil {
		t.Fatal(err)
	}
	_, err = anonymous.KV().Put(&api.KVPair{Key: "consultest/acl", Value: []byte("y")}, nil)
	var status api.StatusError
	if !errors.As(err, &status) || status.Code != 403 {
		t.Fatalf("anonymous put error = %v, want a 403", err)
	}
}

func TestBinaryPath(t *testing.T) {
	dir := t.TempDir()
	notExec := filepath.Join(dir, "consul-not-exec")
	if err := os.WriteFile(notExec, []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	isExec := filepath.Join(dir, "consul")
	if err := os.WriteFile(isExec, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		env     string
		want    string
		wantErr bool
	}{
		{name: "env executable", env: isExec, want: isExec},
		{name: "env not executable", env: notExec, wantErr: true},
		{name: "env missing", env: filepath.Join(dir, "absent"), wantErr: true},
		{name: "env directory", env: dir, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv(binEnv, tt.env)
			got, err := BinaryPath()
			if (err != nil) != tt.wantErr || got != tt.want {
				t.Fatalf("BinaryPath() = %q, %v; want %q, error %v", got, err, tt.want, tt.wantErr)
			}
		})
	}
	t.Run("module root", func(t *testing.T) {
		t.Setenv(binEnv, "")
		root, err := moduleRoot()
		if err != nil {
			t.Fatal(err)
		}
		if !declaresModule(filepath.Join(root, "go.mod")) {
			t.Fatalf("moduleRoot() = %s, whose go.mod is not %s", root, modulePath)
		}
	})
}
