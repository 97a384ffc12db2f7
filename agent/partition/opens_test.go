package partition

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/logagent/logagent/election"
	"github.com/logagent/logagent/internal/consultest"
	"github.com/logagent/logagent/segstore"
)

// gatedFS holds every file open under a path containing gate until
// release is called; dirs are the directories whose files were opened.
type gatedFS struct {
	segstore.FS
	gate         string
	released     chan struct{}
	releasedOnce sync.Once
	mu           sync.Mutex
	dirs         map[string]bool
}

func newGatedFS(gate string) *gatedFS {
	return &gatedFS{FS: segstore.OSFS{}, gate: gate, released: make(chan struct{}), dirs: map[string]bool{}}
}

func (g *gatedFS) OpenFile(name string, flag int, perm os.FileMode) (segstore.File, error) {
	if strings.Contains(name, g.gate) {
		g.mu.Lock()
		g.dirs[filepath.Dir(name)] = true
		g.mu.Unlock()
		<-g.released
	}
	return g.FS.OpenFile(name, flag, perm)
}

func (g *gatedFS) release() { g.releasedOnce.Do(func() { close(g.released) }) }

// gatedDirs is how many directories had a file opened under the gate.
func (g *gatedFS) gatedDirs() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.dirs)
}

// TestReplicaFollowsWhileOthersOpen: a replica that is open is handed
// newer metadata while another partition of the same creation is still
// opening. Before, the manager handed metadata only between whole rounds
// of opens: at 10,000 partitions the followers learned their leaders
// about a minute after the leaders had won, and the leaders had shrunk
// the ISRs meanwhile (lag_time_max), thousands of Consul transactions
// undone again once the opens were over.
func TestReplicaFollowsWhileOthersOpen(t *testing.T) {
	srv := consultest.Start(t)
	n2 := startElectionOnly(t, srv, "n2")
	fsys := newGatedFS(string(os.PathSeparator) + "opq-1" + string(os.PathSeparator))
	m, coord := startManagerFS(t, srv, "n1", "", time.Now, fsys)
	// Before the manager's cleanup, which waits for the opens under way.
	t.Cleanup(fsys.release)

	createTopic(t, coord, "opq", [][]string{{"n2", "n1"}, {"n1", "n2"}}, 1)
	waitFor(t, func() bool { return fsys.gatedDirs() == 1 }, "opq/1's open held at the gate")
	waitFor(t, func() bool { return m.Get("opq", 0) != nil }, "opq/0 open on n1")

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := n2.CampaignAs(ctx, "opq", 0, election.Candidate{LogEpoch: election.NoEpoch}); err != nil {
		t.Fatalf("n2's campaign for opq/0: %v", err)
	}
	waitFor(t, func() bool {
		v := m.Get("opq", 0).CurrentView()
		return v.Role == RoleFollower && v.Leader == "n2"
	}, "n1's replica of opq/0 following n2 while opq/1 still opens")
	if m.Get("opq", 1) != nil {
		t.Fatal("opq/1 opened through the gate")
	}

	fsys.release()
	waitFor(t, func() bool {
		r := m.Get("opq", 1)
		return r != nil && r.CurrentView().Role == RoleLeader
	}, "n1 leading opq/1 once its open went on")
}

// TestQueuedOpenOfDeletedTopicSkipped: the opens still queued when their
// topic is deleted are not made (no files created only to be removed);
// the ones under way finish and their replicas are removed.
func TestQueuedOpenOfDeletedTopicSkipped(t *testing.T) {
	srv := consultest.Start(t)
	fsys := newGatedFS(string(os.PathSeparator) + "gone-")
	m, coord := startManagerFS(t, srv, "n1", "", time.Now, fsys)
	t.Cleanup(fsys.release)

	const partitions = openConcurrency + 4
	assignment := make([][]string, partitions)
	for i := range assignment {
		assignment[i] = []string{"n1"}
	}
	createTopic(t, coord, "gone", assignment, 1)
	waitFor(t, func() bool { return fsys.gatedDirs() == openConcurrency }, "every open worker held at the gate")

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := coord.DeleteTopic(ctx, "gone"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { _, ok := coord.Metadata().Topic("gone"); return !ok }, "the deletion in the metadata")
	fsys.release()
	waitFor(t, func() bool {
		for p := range partitions {
			if m.Get("gone", p) != nil || m.opensPending() {
				return false
			}
			if _, err := os.Stat(partitionDir(m.dataDir, "gone", p)); !errors.Is(err, os.ErrNotExist) {
				return false
			}
		}
		return true
	}, "every replica of the deleted topic closed and its directory removed")
	if got := fsys.gatedDirs(); got != openConcurrency {
		t.Fatalf("files were opened in %d partition directories; want the %d opens under way at the deletion, not the %d queued", got, openConcurrency, partitions-openConcurrency)
	}
}
