package agent

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/logagent/logagent/segstore"
)

// TestLeftoverOfADeletedTopicIsNotAdopted: a partition directory that lost
// its replica.json but kept its segments (a deletion cut short by a crash or
// an I/O error: the directory's entries are removed one by one) must not
// become the log of a new topic of the same name.
func TestLeftoverOfADeletedTopicIsNotAdopted(t *testing.T) {
	c := startTestCluster(t, 1, "")
	ta := c.agents[0]
	c.createTopic(ta, "again", 1, 1, 1)
	c.waitLeader("again", 0, 1)
	ta.mustProduce("again", 0, "old-0", "old-1", "old-2")
	dir := partitionDir(ta.dataDir, "again", 0)
	file, found, err := readReplicaFile(dir)
	if err != nil || !found {
		t.Fatalf("replica.json: %v %v", found, err)
	}
	if err := ta.stop(); err != nil {
		t.Fatal(err)
	}
	c.deleteInConsul("again", file.TopicID)
	if err := os.Remove(filepath.Join(dir, replicaFileName)); err != nil {
		t.Fatal(err)
	}
	ta.start()
	c.createTopic(ta, "again", 1, 1, 1)
	c.waitLeader("again", 0, 1)
	r := ta.mustProduce("again", 0, "new-0")
	if r.BaseOffset == nil || *r.BaseOffset != 0 {
		t.Errorf("the new topic's first record did not go to offset 0 (%s): the deleted topic's records are its log", fmtOffset(r.BaseOffset))
	}
	if got := ta.fetchValues("again", 0, 0); len(got) != 1 || got[0] != "new-0" {
		t.Errorf("the new topic reads %v, want only new-0 at 0", got)
	}
	// Moved aside for the operator, not deleted: nothing shows whose
	// files they are.
	if moved, _ := filepath.Glob(filepath.Join(ta.dataDir, orphanedDirName, "again-0.unknown", "*.log")); len(moved) == 0 {
		t.Errorf("the leftover segments are not in %s/again-0.unknown", orphanedDirName)
	}
}

func fmtOffset(o *int64) string {
	if o == nil {
		return "none"
	}
	return strconv.FormatInt(*o, 10)
}

// TestDeletionCutShortLeavesNothingToAdopt: a topic's deletion whose removal
// of the files fails part way (here: at once, a fault on every removal under
// deleting/) has already taken the partition's directory away from its
// name, so a topic created again under that name starts empty; the files
// left are removed at the next start.
func TestDeletionCutShortLeavesNothingToAdopt(t *testing.T) {
	c := newTestCluster(t, 1, "", nil)
	ta := c.agents[0]
	fsys := ta.useFaultFS()
	ta.start()
	c.createTopic(ta, "cut", 1, 1, 1)
	c.waitLeader("cut", 0, 1)
	ta.mustProduce("cut", 0, "old-0", "old-1")
	fsys.Inject(segstore.Fault{Op: segstore.OpRemove, Path: string(filepath.Separator) + deletingDirName + string(filepath.Separator), Sticky: true})
	if err := ta.coord.DeleteTopic(context.Background(), "cut"); err != nil {
		t.Fatal(err)
	}
	dir := partitionDir(ta.dataDir, "cut", 0)
	left := filepath.Join(ta.dataDir, deletingDirName, "cut-0")
	c.waitFor(10*time.Second, "the partition directory moved into deleting/", func() bool {
		_, errDir := os.Stat(dir)
		_, errLeft := os.Stat(left)
		return os.IsNotExist(errDir) && errLeft == nil
	})
	c.createTopic(ta, "cut", 1, 1, 1)
	c.waitLeader("cut", 0, 1)
	if r := ta.mustProduce("cut", 0, "new-0"); r.BaseOffset == nil || *r.BaseOffset != 0 {
		t.Errorf("the new topic's first record did not go to offset 0 (%s)", fmtOffset(r.BaseOffset))
	}
	if err := ta.stop(); err != nil {
		t.Fatal(err)
	}
	fsys.Clear()
	ta.start()
	c.waitLeader("cut", 0, 1)
	if _, err := os.Stat(left); !os.IsNotExist(err) {
		t.Errorf("%s is still there after a restart: %v", left, err)
	}
	if got := ta.fetchValues("cut", 0, 0); len(got) != 1 || got[0] != "new-0" {
		t.Errorf("the new topic reads %v, want only new-0 at 0", got)
	}
}
