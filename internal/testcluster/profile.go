package testcluster

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// ProfileDirEnv names a directory; a benchmark that honours it turns on
// the agents' client.pprof and records CPU profiles of them into it while
// it runs (see ProfileCPU). Read them with `go tool pprof -top FILE`.
const ProfileDirEnv = "LOGAGENT_BENCH_PROFILE"

// ProfileHCL is the configuration that lets ProfileCPU read an agent's
// profiles.
const ProfileHCL = "client { pprof = true }\n"

// ProfileCPU records a CPU profile of each agent over the next d, all at
// once, into dir/<name>-<node id>.pprof; the agents need ProfileHCL. wait
// returns when every profile is written.
func ProfileCPU(dir, name string, d time.Duration, agents ...*Agent) (wait func() error) {
	hc := &http.Client{Timeout: d + 30*time.Second}
	errs := make(chan error, len(agents))
	for _, a := range agents {
		go func() {
			path := filepath.Join(dir, strings.NewReplacer("/", "-", "=", "-").Replace(name)+"-"+a.NodeID+".pprof")
			errs <- fetchProfile(hc, fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", a.ClientAddr, max(int(d.Seconds()), 1)), path)
		}()
	}
	return func() error {
		var all []error
		for range agents {
			all = append(all, <-errs)
		}
		return errors.Join(all...)
	}
}

func fetchProfile(hc *http.Client, url, path string) error {
	resp, err := hc.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("GET %s: %s: %s", url, resp.Status, body)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
