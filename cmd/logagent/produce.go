package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/logagent/logagent/client"
)

func runProduce(args []string, stdout, stderr io.Writer) error {
	ctx, stop := signalContext()
	defer stop()
	return produce(ctx, args, os.Stdin, stdout, stderr)
}

// produce sends each line of stdin (without its line ending) as one record,
// batched, and prints where they went. Empty lines are skipped, as the
// agent does for a text/plain produce. It stops at the first record that
// fails, and at ctx's end (Ctrl-C, SIGTERM), which is a failure too, also
// while stdin has nothing to read, after waiting for the records already
// sent.
func produce(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	fs := newFlagSet("produce", stderr)
	topic := fs.String("topic", "", "the topic to write to (required)")
	key := fs.String("key", "", "the key of every record (default none: records spread over the partitions)")
	keyDelim := fs.String("K", "", "key delimiter: each line is key, delimiter, value (kcat's -K); a line without it has no key")
	var headers stringList
	fs.Var(&headers, "H", "a header of every record, name=value (repeatable)")
	partition := fs.Int("partition", -1, "write to this partition (default: by key, else spread)")
	acksFlag := fs.String("acks", "all", "all, 1 or 0: what the agent confirms before answering")
	linger := fs.Duration("linger", 5*time.Millisecond, "how long a batch waits for more lines")
	batchBytes := fs.Int("batch-bytes", 1<<20, "largest batch, in bytes")
	maxLine := fs.Int("max-line-bytes", 1<<20, "longest line accepted, in bytes")
	compression := fs.String("compression", "none", "batch compression: none, gzip, snappy, lz4 or zstd")
	timeout := fs.Duration("timeout", 30*time.Second, "give up retrying a batch after this long")
	idempotent := fs.Bool("idempotent", true, "exactly-once appends: the agent drops the copies of a retried batch, so the lines are\n"+
		"written once each, in order, even when a write's outcome is unknown (a timeout, a lost connection):\n"+
		"those are retried too, until -timeout. It does not stop a second run from writing the lines again.\n"+
		"Needs -acks all (with -acks 1 or 0 it is off unless asked for). false: a write of unknown outcome\n"+
		"is not retried and its lines are reported as such")
	addr := addrFlag(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	idempotentSet := flagGiven(fs, "idempotent")
	if *topic == "" {
		return fmt.Errorf("%w: -topic is required", errUsage)
	}
	if *partition < -1 {
		return fmt.Errorf("%w: -partition %d: want a partition number, or none to go by key or spread", errUsage, *partition)
	}
	if *maxLine <= 0 {
		return fmt.Errorf("%w: -max-line-bytes must be positive", errUsage)
	}
	if *key != "" && *keyDelim != "" {
		return fmt.Errorf("%w: -key and -K exclude each other: one key for every record, or a key on each line", errUsage)
	}
	var recordHeaders []client.Header
	for _, h := range headers {
		name, value, ok := strings.Cut(h, "=")
		if !ok || name == "" {
			return fmt.Errorf("%w: -H %q: want name=value", errUsage, h)
		}
		recordHeaders = append(recordHeaders, client.Header{Key: name, Value: []byte(value)})
	}
	acks, err := client.ParseAcks(*acksFlag)
	if err != nil {
		return usageError(err)
	}
	codec, err := client.ParseCompression(*compression)
	if err != nil {
		return fmt.Errorf("%w: -compression: %v", errUsage, err)
	}
	c, err := newAgentClient(addr, retryingHTTPClient(stderr, "produce", false, *timeout))
	if err != nil {
		return err
	}
	if err := checkAgent(ctx, c, *timeout); err != nil {
		return err
	}
	fail := func(err error) error { return explain(err, c.Addr(), *timeout) }
	opts := []client.ProducerOption{client.WithAcks(acks), client.WithLinger(*linger),
		client.WithMaxBatchBytes(*batchBytes), client.WithCompression(codec), client.WithDeliveryTimeout(*timeout)}
	// Unless asked for, idempotence is the client's default: on with
	// acks=all, off with less.
	if idempotentSet {
		opts = append(opts, client.WithIdempotence(*idempotent))
	}
	p, err := c.NewProducer(append(opts, client.WithDefaultTopic(*topic))...)
	if err != nil {
		return usageError(err)
	}
	m := client.Message{Headers: recordHeaders}
	if *key != "" {
		m.Key = []byte(*key)
	}
	delim := []byte(*keyDelim)
	if *partition >= 0 {
		m.Partition = client.ToPartition(*partition)
	}

	// The tally waits for outcomes in order while lines are read; a
	// failure tells the reader to stop.
	futures := make(chan *client.Future, 4096)
	failed := make(chan struct{})
	var tally produceTally
	tallied := make(chan struct{})
	go func() {
		defer close(tallied)
		for f := range futures {
			if res, err := f.Wait(context.Background()); !tally.add(res, err) && tally.failures() == 1 {
				close(failed)
			}
		}
	}()

	scanner := bufio.NewScanner(stdin)
	// Room for the line ending, \r\n at most: it is not part of the record.
	scanner.Buffer(make([]byte, 0, min(*maxLine+2, 64<<10)), *maxLine+2)
	in := readLines(scanner)
	defer close(in.stop)
	var readErr error
	lines, stoppedAt := 0, 0
read:
	for {
		in.next <- struct{}{}
		var line []byte
		var more bool
		select {
		case line, more = <-in.got:
		case <-failed:
			stoppedAt = lines + 1
			break read
		case <-ctx.Done():
			readErr = fmt.Errorf("interrupted: stopped reading stdin after line %d: %w", lines, ctx.Err())
			break read
		}
		if !more {
			if err := in.err; err != nil {
				if errors.Is(err, bufio.ErrTooLong) {
					err = fmt.Errorf("longer than -max-line-bytes %d", *maxLine)
				}
				readErr = fmt.Errorf("stdin after line %d: %w", lines, err)
			}
			break
		}
		select {
		case <-failed:
			stoppedAt = lines + 1
			break read
		default:
		}
		lines++
		if len(line) > *maxLine {
			readErr = fmt.Errorf("stdin after line %d: longer than -max-line-bytes %d", lines-1, *maxLine)
			break
		}
		if len(line) == 0 {
			continue
		}
		m.Value = line
		if len(delim) > 0 {
			// The producer copies key and value: the scanner's buffer
			// is reused for the next line.
			m.Key = nil
			if k, v, ok := bytes.Cut(m.Value, delim); ok {
				m.Key, m.Value = k, v
			}
		}
		f, err := p.Produce(ctx, m)
		if err != nil {
			readErr = fmt.Errorf("line %d: %w", lines, fail(err))
			break
		}
		futures <- f
	}
	close(futures)
	// Records already given to the producer get their chance even after
	// Ctrl-C: those still queued were withdrawn by their context.
	closeCtx, cancel := context.WithTimeout(context.Background(), *timeout+5*time.Second)
	defer cancel()
	closeErr := p.Close(closeCtx)
	<-tallied

	tally.print(stdout, stderr, *topic, acks, fail)
	switch {
	case readErr != nil:
		return readErr
	case tally.failures() > 0 && stoppedAt > 0:
		return fmt.Errorf("%d of %d record(s) sent not acknowledged; stopped reading stdin at line %d: it and the lines after it were not sent",
			tally.failures(), tally.total(), stoppedAt)
	case tally.failures() > 0:
		return fmt.Errorf("%d of %d record(s) not acknowledged", tally.failures(), tally.total())
	case closeErr != nil:
		return fail(closeErr)
	}
	return nil
}

// lineReader hands out the lines of stdin, read by a goroutine of its own:
// a read of a terminal or of an idle pipe cannot be interrupted, and
// Ctrl-C, SIGTERM or a failed record must still stop produce while stdin
// has nothing to say.
type lineReader struct {
	// next asks for a line; got answers it, valid until the next is asked
	// for (the scanner reuses its buffer), and is closed at the end of
	// stdin.
	next chan struct{}
	got  chan []byte
	// stop ends the goroutine; one blocked reading stdin ends once that
	// read returns.
	stop chan struct{}
	// err is the scanner's error, to be read once got is closed.
	err error
}

func readLines(scanner *bufio.Scanner) *lineReader {
	in := &lineReader{next: make(chan struct{}), got: make(chan []byte), stop: make(chan struct{})}
	go func() {
		defer close(in.got)
		for {
			select {
			case <-in.next:
			case <-in.stop:
				return
			}
			if !scanner.Scan() {
				in.err = scanner.Err()
				return
			}
			select {
			case in.got <- scanner.Bytes():
			case <-in.stop:
				return
			}
		}
	}()
	return in
}

// produceTally counts outcomes; the offsets of one partition arrive in
// order, so each range is first to last.
type produceTally struct {
	ranges       map[int]*offsetRange
	notWritten   int
	firstFailure error
	unknown      int
	firstUnknown error
}

type offsetRange struct {
	first, last int64
	count       int
}

// add counts one outcome and reports whether it was a success.
func (t *produceTally) add(res *client.Result, err error) bool {
	switch {
	case errors.Is(err, client.ErrOutcomeUnknown):
		t.unknown++
		if t.firstUnknown == nil {
			t.firstUnknown = err
		}
		return false
	case err != nil:
		t.notWritten++
		if t.firstFailure == nil {
			t.firstFailure = err
		}
		return false
	}
	if t.ranges == nil {
		t.ranges = map[int]*offsetRange{}
	}
	r := t.ranges[res.Partition]
	if r == nil {
		r = &offsetRange{first: res.Offset}
		t.ranges[res.Partition] = r
	}
	r.last = res.Offset
	r.count++
	return true
}

func (t *produceTally) failures() int { return t.notWritten + t.unknown }

func (t *produceTally) total() int {
	n := t.failures()
	for _, r := range t.ranges {
		n += r.count
	}
	return n
}

// print says where the records went and, through explain, why those that
// failed did.
func (t *produceTally) print(stdout, stderr io.Writer, topic string, acks client.Acks, explain func(error) error) {
	written := t.total() - t.failures()
	if acks == client.AcksNone {
		fmt.Fprintf(stdout, "sent %d record(s) to topic %s (acks=0: offsets are not reported)\n", written, topic)
	} else {
		fmt.Fprintf(stdout, "produced %d record(s) to topic %s\n", written, topic)
	}
	partitions := make([]int, 0, len(t.ranges))
	for p := range t.ranges {
		partitions = append(partitions, p)
	}
	slices.Sort(partitions)
	for _, p := range partitions {
		r := t.ranges[p]
		if acks == client.AcksNone {
			fmt.Fprintf(stdout, "  partition %d: %d record(s)\n", p, r.count)
			continue
		}
		fmt.Fprintf(stdout, "  partition %d: offsets %d-%d (%d record(s))\n", p, r.first, r.last, r.count)
	}
	if t.notWritten > 0 {
		fmt.Fprintf(stderr, "%d record(s) not written: %v\n", t.notWritten, explain(t.firstFailure))
	}
	if t.unknown > 0 {
		fmt.Fprintf(stderr, "%d record(s) of unknown outcome (they may have been written; sending them again may duplicate them): %v\n",
			t.unknown, explain(t.firstUnknown))
	}
}
