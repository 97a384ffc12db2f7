package main

import (
	"bytes"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/logagent/logagent/client"
	"github.com/logagent/logagent/internal/testenv"
)

// TestMoveBarRender: a bar at 0 %, 61 % and 100 %, with an ETA and
// without, and one whose total is not known.
func TestMoveBarRender(t *testing.T) {
	from, to := []string{"n1", "n2", "n3"}, []string{"n2", "n3", "n4"}
	tests := []struct {
		name string
		bar  moveBar
		want string
	}{
		{"0 %, no rate yet", moveBar{Name: "orders/3", From: from, To: to, Done: 0, Total: 500, ETA: -1},
			"orders/3 [n1 n2 n3]→[n2 n3 n4]  [--------------------]    0%  0 of 500 offsets  0 B sent"},
		{"61 %", moveBar{Name: "orders/3", From: from, To: to, Done: 305, Total: 500, Sent: 312 << 20, ETA: 4200 * time.Millisecond},
			"orders/3 [n1 n2 n3]→[n2 n3 n4]  [############--------]   61%  305 of 500 offsets  312.0 MiB sent  ETA 4s"},
		{"100 %: no ETA", moveBar{Name: "orders/3", From: from, To: to, Done: 500, Total: 500, Sent: 512 << 20, ETA: 0},
			"orders/3 [n1 n2 n3]→[n2 n3 n4]  [####################]  100%  500 of 500 offsets  512.0 MiB sent"},
		{"unknown total", moveBar{Name: "t/0", From: []string{"n1"}, To: []string{"n2"}, Sent: 2048, ETA: -1},
			"t/0 [n1]→[n2]  [????????????????????]   ?%  2.0 KiB sent"},
		{"a cancel's way back", moveBar{Name: "t/0", From: []string{"n1", "n2", "n3"}, To: []string{"n1", "n2", "n3"}, ETA: -1, Cancelling: true},
			"t/0 [n1 n2 n3]→[n1 n2 n3]  cancelling: back to the original replicas"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.bar.render(); got != tc.want {
				t.Errorf("got\n%q\nwant\n%q", got, tc.want)
			}
		})
	}
}

// TestBarOf: the share comes from the leader's log start and end and each
// added replica's log end; in-sync replicas count whole; no progress (a
// follower answered) is an unknown total.
func TestBarOf(t *testing.T) {
	i64 := func(v int64) *int64 { return &v }
	r := &client.MoveStatus{Replicas: []string{"n2", "n3", "n4", "n5", "n1"}, Reassignment: &client.Reassignment{
		Target: []string{"n2", "n3", "n4", "n5"}, Adding: []string{"n4", "n5"}, Removing: []string{"n1"},
		LeaderLogStartOffset: i64(100), LeaderLogEndOffset: i64(300),
		Progress: []client.ReassignmentProgress{{Node: "n4", LogEndOffset: 200, CatchUpBytes: 10}, {Node: "n5", LogEndOffset: 300, InSync: true, CatchUpBytes: 20}},
	}}
	b := barOf("t/0", r)
	if got := fmt.Sprint(b.From, b.To, b.Done, b.Total, b.Sent); got != "[n2 n3 n1] [n2 n3 n4 n5] 300 400 30" {
		t.Errorf("bar %s", got)
	}
	r.Reassignment.Progress, r.Reassignment.LeaderLogStartOffset, r.Reassignment.LeaderLogEndOffset = nil, nil, nil
	if b := barOf("t/0", r); b.Total != 0 || b.ETA >= 0 {
		t.Errorf("without progress: %+v, want an unknown total and ETA", b)
	}
}

// TestETA: the time left from the rate since the move was first seen.
func TestETA(t *testing.T) {
	var e etas
	t0 := time.Unix(1000, 0)
	b := moveBar{Name: "t/0", Done: 100, Total: 1000, ETA: -1}
	e.fill(&b, t0)
	if b.ETA >= 0 {
		t.Errorf("ETA %s at the first sight, want none", b.ETA)
	}
	b = moveBar{Name: "t/0", Done: 300, Total: 1000, ETA: -1}
	e.fill(&b, t0.Add(2*time.Second))
	if b.ETA != 7*time.Second {
		t.Errorf("ETA %s, want 7s (700 left at 100/s)", b.ETA)
	}
}

// TestProgressOutPlain: a writer that is not a terminal (a buffer, a pipe,
// a file) gets plain lines, each once, and not one escape byte; a
// terminal's gets bars redrawn in place.
func TestProgressOutPlain(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	f, err := os.CreateTemp(t.TempDir(), "out")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if isTerminal(w) || isTerminal(f) || isTerminal(&bytes.Buffer{}) {
		t.Fatal("a pipe, a file or a buffer taken for a terminal")
	}
	bar := moveBar{Name: "t/0", From: []string{"n1"}, To: []string{"n2"}, Done: 5, Total: 10, ETA: -1}
	var buf bytes.Buffer
	out := newProgressOut(&buf)
	out.update("head", []moveBar{bar}, "  line 1")
	out.update("head", []moveBar{bar}, "  line 1")
	out.println("permanent")
	out.update("head", []moveBar{bar}, "  line 2")
	if got, want := buf.String(), "  line 1\npermanent\n  line 2\n"; got != want {
		t.Errorf("plain output %q, want %q", got, want)
	}
	if bytes.IndexByte(buf.Bytes(), 0x1b) >= 0 {
		t.Errorf("escape bytes in plain output %q", buf.String())
	}

	master, slave := openPTY(t)
	defer master.Close()
	defer slave.Close()
	if !isTerminal(slave) {
		t.Fatal("a pseudo-terminal not taken for a terminal")
	}
	buf.Reset()
	tty := &progressOut{w: &buf, tty: true}
	tty.update("head", []moveBar{bar, bar}, "  line 1")
	tty.update("head", []moveBar{bar}, "  line 1")
	tty.println("done")
	line := bar.render()
	want := "\x1b[2Khead\n\x1b[2K" + line + "\n\x1b[2K" + line + "\n\x1b[J" +
		"\x1b[3A\x1b[2Khead\n\x1b[2K" + line + "\n\x1b[J" +
		"\x1b[2A\x1b[Jdone\n"
	if got := buf.String(); got != want {
		t.Errorf("terminal output\n%q\nwant\n%q", got, want)
	}
	if strings.Contains(buf.String(), "line 1") {
		t.Error("the plain line drawn on a terminal")
	}
}

// openPTY opens a pseudo-terminal pair (Linux's /dev/ptmx).
func openPTY(t *testing.T) (master, slave *os.File) {
	t.Helper()
	master, err := os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		testenv.SkipUnlessCI(t, "no pseudo-terminal here: %v", err)
	}
	fd := int(master.Fd())
	if err := unix.IoctlSetPointerInt(fd, unix.TIOCSPTLCK, 0); err != nil {
		master.Close()
		t.Fatal(err)
	}
	n, err := unix.IoctlGetInt(fd, unix.TIOCGPTN)
	if err != nil {
		master.Close()
		t.Fatal(err)
	}
	slave, err = os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		master.Close()
		t.Fatal(err)
	}
	return master, slave
}
