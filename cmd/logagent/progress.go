package main

import (
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strings"
	"time"

	"golang.org/x/term"

	"github.com/logagent/logagent/client"
)

// barWidth is the number of cells of a move's progress bar.
const barWidth = 20

// moveBar is one move in flight as its progress bar shows it: the share of
// the leader's log its added replicas hold, in offsets (the only measure
// of the whole the agent has), and the bytes sent to them.
type moveBar struct {
	Name     string // topic/partition
	From, To []string
	// Done and Total are the offsets the added replicas hold of the
	// leader's log, summed over them; Total 0 is not known (the leader did
	// not answer with its progress).
	Done, Total int64
	Sent        int64
	// ETA is the time left at the rate seen so far; negative when there is
	// no rate yet.
	ETA time.Duration
	// Cancelling marks a cancel's way back: nothing to copy, only the
	// leader's last transaction (and a handover first) to wait for.
	Cancelling bool
}

// render is the bar's one line, such as
// "orders/3 [n1 n2 n3]→[n2 n3 n4]  [############--------]  61%  305 of 500 offsets  312.0 MiB sent  ETA 4s".
func (b moveBar) render() string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "%s [%s]→[%s]  ", b.Name, strings.Join(b.From, " "), strings.Join(b.To, " "))
	if b.Cancelling {
		sb.WriteString("cancelling: back to the original replicas")
		return sb.String()
	}
	if b.Total <= 0 {
		fmt.Fprintf(&sb, "[%s]   ?%%  %s sent", strings.Repeat("?", barWidth), formatBytes(b.Sent))
		return sb.String()
	}
	f := min(max(float64(b.Done)/float64(b.Total), 0), 1)
	filled := int(math.Floor(f * barWidth))
	fmt.Fprintf(&sb, "[%s%s]  %3d%%  %d of %d offsets  %s sent", strings.Repeat("#", filled), strings.Repeat("-", barWidth-filled),
		int(math.Floor(f*100)), b.Done, b.Total, formatBytes(b.Sent))
	if b.ETA >= 0 && f < 1 {
		fmt.Fprintf(&sb, "  ETA %s", b.ETA.Round(time.Second))
	}
	return sb.String()
}

// barOf is the bar of r's move; r.Reassignment must not be nil.
func barOf(name string, r *client.MoveStatus) moveBar {
	m := r.Reassignment
	b := moveBar{Name: name, To: m.Target, ETA: -1, Cancelling: m.Cancelled}
	for _, n := range r.Replicas {
		if !slices.Contains(m.Adding, n) {
			b.From = append(b.From, n)
		}
	}
	if m.LeaderLogStartOffset == nil || m.LeaderLogEndOffset == nil || len(m.Progress) == 0 {
		for _, p := range m.Progress {
			b.Sent += p.CatchUpBytes
		}
		return b
	}
	start, end := *m.LeaderLogStartOffset, *m.LeaderLogEndOffset
	for _, p := range m.Progress {
		b.Sent += p.CatchUpBytes
		b.Total += end - start
		switch {
		case p.InSync || p.LogEndOffset >= end:
			b.Done += end - start
		case p.LogEndOffset > start:
			b.Done += p.LogEndOffset - start
		}
	}
	if b.Total == 0 {
		// An empty log: nothing to copy, the replicas only have to join.
		b.Done, b.Total = 1, 1
	}
	return b
}

// etas estimates the time left of each move from the rate of its Done
// since it was first seen.
type etas struct {
	first map[string]etaSample
}

type etaSample struct {
	at   time.Time
	done int64
}

// fill sets b.ETA from what was seen of the move before, at now.
func (e *etas) fill(b *moveBar, now time.Time) {
	if e.first == nil {
		e.first = map[string]etaSample{}
	}
	s, ok := e.first[b.Name]
	if !ok || b.Total <= 0 || b.Done < s.done {
		e.first[b.Name] = etaSample{now, b.Done}
		return
	}
	dt := now.Sub(s.at)
	if dt <= 0 || b.Done == s.done {
		return
	}
	rate := float64(b.Done-s.done) / dt.Seconds()
	b.ETA = time.Duration(float64(b.Total-b.Done) / rate * float64(time.Second))
}

// progressOut writes a command's progress: on a terminal a block of bars
// redrawn in place, anywhere else (a pipe, a file, a test, a CI log) plain
// lines, each printed once when it changes, and never an escape sequence.
type progressOut struct {
	w   io.Writer
	tty bool
	// drawn is how many bar lines the terminal shows below the last
	// permanent line.
	drawn int
	last  string
}

func newProgressOut(w io.Writer) *progressOut {
	return &progressOut{w: w, tty: isTerminal(w)}
}

// isTerminal says whether w is a terminal, where bars may be drawn.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// println writes a permanent line, above the bars on a terminal.
func (p *progressOut) println(line string) {
	if p.tty && p.drawn > 0 {
		// Up over the bars, clearing them; they are drawn again below at
		// the next update.
		fmt.Fprintf(p.w, "\x1b[%dA\x1b[J", p.drawn)
		p.drawn = 0
	}
	fmt.Fprintln(p.w, line)
}

// update shows the progress now: on a terminal head (when not "") and the
// bars, elsewhere the plain line (when not "" and not the last one
// printed).
func (p *progressOut) update(head string, bars []moveBar, plain string) {
	if !p.tty {
		if plain != "" && plain != p.last {
			fmt.Fprintln(p.w, plain)
			p.last = plain
		}
		return
	}
	var sb strings.Builder
	if p.drawn > 0 {
		fmt.Fprintf(&sb, "\x1b[%dA", p.drawn)
	}
	lines := make([]string, 0, len(bars)+1)
	if head != "" {
		lines = append(lines, head)
	}
	for _, b := range bars {
		lines = append(lines, b.render())
	}
	for _, l := range lines {
		sb.WriteString("\x1b[2K")
		sb.WriteString(l)
		sb.WriteByte('\n')
	}
	// Clear what is left of a taller block drawn before.
	sb.WriteString("\x1b[J")
	io.WriteString(p.w, sb.String())
	p.drawn = len(lines)
}
