package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/logagent/logagent/client"
)

func runConsume(args []string, stdout, stderr io.Writer) error {
	ctx, stop := signalContext()
	defer stop()
	return consume(ctx, args, stdout, stderr)
}

// consume prints the records of a topic: every partition, or the one
// -partition names, or with -group those the group gives this member.
// Without -follow it prints, from each partition, those below the high
// watermark of its first fetch and exits; with -follow it long-polls for
// more until ctx ends (Ctrl-C), which is then a success. -n stops it after
// that many records. Records of one partition come in offset order;
// partitions interleave.
func consume(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("consume", stderr)
	topic := fs.String("topic", "", "the topic to read (required)")
	partition := fs.Int("partition", allPartitions, "the partition to read (default: every partition)")
	group := fs.String("group", "", "read as a member of this consumer group the partitions it is given, from the group's committed offsets, committing every second and on exit")
	fromFlag := fs.String("from", "earliest", "where to start: earliest, latest or an offset (with -group: where a partition the group has no committed offset of starts)")
	follow := fs.Bool("follow", false, "keep waiting for new records (until Ctrl-C), retrying, and saying so, while the agent does not answer")
	count := fs.Int("n", 0, "stop after this many records (default: no limit)")
	format := fs.String("format", "raw", "raw (each value on a line), json (one JSON object per record and line: partition, offset,\n"+
		"timestamp, key, value, headers; ndjson is the same) or a format string as kcat's -f: %t topic, %p partition,\n"+
		"%o offset, %k key, %s value, %K key length, %S value length, %T timestamp (ms), %h headers (name=value,...),\n"+
		"%% a percent sign, \\n \\t escapes; nothing is added after it, end it with \\n")
	maxBytes := fs.Int("max-bytes", 1<<20, "max_bytes of each fetch")
	wait := fs.Duration("wait", 5*time.Second, "with -follow, how long each fetch waits on the agent for records")
	timeout := fs.Duration("timeout", 10*time.Second, "without -follow, give up when the agent has given nothing (it is retried meanwhile),\n"+
		"or with -group the group no partition to this member, for this long")
	addr := addrFlag(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *topic == "" {
		return fmt.Errorf("%w: -topic is required", errUsage)
	}
	if *partition < allPartitions {
		return fmt.Errorf("%w: -partition %d: want a partition number, or none for every partition", errUsage, *partition)
	}
	if *count < 0 || *timeout <= 0 {
		return fmt.Errorf("%w: -n must not be negative and -timeout must be positive", errUsage)
	}
	if *follow && *wait <= 0 {
		// A fetch answers as soon as records come, so a wait costs no
		// latency; without one each partition's fetches would follow
		// each other as fast as the agent answers them.
		return fmt.Errorf("%w: -wait %v with -follow: want a positive duration (a fetch returns as soon as records come)", errUsage, *wait)
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if *group != "" && *count > 0 {
		// Close commits the position after every record Poll returned,
		// printed or not.
		return fmt.Errorf("%w: -n and -group exclude each other: a member commits every record it is given, so those past -n would count as read", errUsage)
	}
	if *group != "" && set["partition"] {
		return fmt.Errorf("%w: -partition and -group exclude each other: the group decides which partitions this member reads", errUsage)
	}
	from, err := parseStartOffset(*fromFlag)
	if err != nil {
		return err
	}
	if *group != "" && from >= 0 {
		return fmt.Errorf("%w: -from %s with -group: a member starts at the group's committed offset; set one with 'logagent group reset-offsets %s -topic %s -to %s' first", errUsage, *fromFlag, *group, *topic, *fromFlag)
	}
	write, err := recordWriter(*format, *topic)
	if err != nil {
		return err
	}
	c, err := newAgentClient(addr, retryingHTTPClient(stderr, "consume", *follow, *timeout))
	if err != nil {
		return err
	}
	fetchWait := time.Duration(0)
	if *follow {
		fetchWait = *wait
	}
	r := &reader{follow: *follow, limit: *count, idle: *timeout + fetchWait, out: bufio.NewWriter(stdout), write: write}
	defer r.out.Flush()
	fail := func(err error) error { return explain(err, c.Addr(), *timeout) }
	if err := checkAgent(ctx, c, *timeout); err != nil {
		return err
	}
	if *group != "" {
		// The topic is looked up first so that a wrong name fails at
		// once instead of leaving a member waiting for partitions.
		if _, err := describeTopic(ctx, c, *topic, *timeout); err != nil {
			return fail(usageError(err))
		}
		return fail(r.group(ctx, c, *group, *topic, from, client.WithFetchOptions(client.WithFetchMaxBytes(*maxBytes), client.WithFetchMaxWait(fetchWait))))
	}
	partitions := []int{*partition}
	if *partition == allPartitions {
		info, err := describeTopic(ctx, c, *topic, *timeout)
		if err != nil {
			return fail(err)
		}
		partitions = partitions[:0]
		for _, p := range info.Partitions {
			partitions = append(partitions, p.Partition)
		}
	}
	var consumers []*client.Consumer
	for _, p := range partitions {
		cons, err := c.NewConsumer(*topic, p, from, client.WithFetchMaxBytes(*maxBytes), client.WithFetchMaxWait(fetchWait))
		if err != nil {
			return usageError(err)
		}
		consumers = append(consumers, cons)
	}
	err = r.partitions(ctx, consumers)
	var failed *partitionError
	if *partition == allPartitions && errors.As(err, &failed) {
		// The agent's message ("offset 100 is outside the log") does not
		// say which of the partitions it is about.
		return &explained{line: fmt.Sprintf("partition %d: %v", partitions[failed.index], fail(failed.err)), err: err}
	}
	return fail(err)
}

// partitionError is the failure of the consumer at index of those
// reader.partitions read.
type partitionError struct {
	index int
	err   error
}

func (e *partitionError) Error() string { return e.err.Error() }
func (e *partitionError) Unwrap() error { return e.err }

// describeTopic describes topic within timeout.
func describeTopic(ctx context.Context, c *client.Client, topic string, timeout time.Duration) (*client.TopicInfo, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	return c.DescribeTopic(ctx, topic)
}

// reader prints records, from partitions read side by side or from a
// group member, and stops after limit records (0: no limit).
type reader struct {
	follow bool
	limit  int
	// idle is how long a Poll may go without an answer, without follow.
	idle  time.Duration
	write func(*bufio.Writer, client.Record) error

	mu      sync.Mutex // out, printed
	out     *bufio.Writer
	printed int
}

// errLimit ends the reading once -n records are printed.
var errLimit = errors.New("consume: -n records printed")

// print writes records and flushes them; it returns errLimit once the
// limit is reached, the records beyond it not written.
func (r *reader) print(records []client.Record) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rec := range records {
		if r.limit > 0 && r.printed == r.limit {
			break
		}
		if err := r.write(r.out, rec); err != nil {
			return err
		}
		r.printed++
	}
	if err := r.out.Flush(); err != nil {
		return err
	}
	if r.limit > 0 && r.printed == r.limit {
		return errLimit
	}
	return nil
}

// partitions reads consumers side by side, one goroutine each. A
// consumer's failure comes as a *partitionError.
func (r *reader) partitions(ctx context.Context, consumers []*client.Consumer) error {
	parent := ctx
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errs := make([]error, len(consumers))
	var wg sync.WaitGroup
	for i, cons := range consumers {
		wg.Go(func() {
			errs[i] = r.partition(ctx, cons)
			if errs[i] != nil {
				cancel() // one partition failing, or -n reached, ends the others: exit at once
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		if errors.Is(err, errLimit) {
			return nil
		}
	}
	for i, err := range errs {
		if err != nil && !errors.Is(err, context.Canceled) {
			return &partitionError{index: i, err: err}
		}
	}
	for _, err := range errs {
		// A sibling's cancel is no failure; the command's own end
		// (Ctrl-C, SIGTERM) before the end of the partitions is, without
		// -follow (a partition with -follow returns nil then).
		if err != nil && parent.Err() != nil {
			return fmt.Errorf("interrupted before the end of the partitions: %w", parent.Err())
		}
	}
	return nil
}

// partition prints one partition's records. Without follow it stops at
// the high watermark of its first fetch, and fails when a Poll gets no
// answer within r.idle; with follow it runs until ctx ends, which is then
// no error.
func (r *reader) partition(ctx context.Context, cons *client.Consumer) error {
	end := int64(-1) // without follow: the high watermark of the first fetch
	for {
		records, err := r.poll(ctx, cons.Poll)
		if err != nil {
			if r.follow && ctx.Err() != nil {
				return nil
			}
			return err
		}
		if !r.follow && end < 0 {
			end = cons.HighWatermark()
		}
		if !r.follow {
			n := 0
			for n < len(records) && records[n].Offset < end {
				n++
			}
			records = records[:n]
		}
		if err := r.print(records); err != nil {
			return err
		}
		if !r.follow && cons.Position() >= end {
			return nil
		}
	}
}

// poll calls one Poll, bounded by r.idle without follow.
func (r *reader) poll(ctx context.Context, poll func(context.Context) ([]client.Record, error)) ([]client.Record, error) {
	if r.follow {
		return poll(ctx)
	}
	ctx, cancel := context.WithTimeout(ctx, r.idle)
	defer cancel()
	return poll(ctx)
}

// groupCloseTimeout bounds the last commit and the leave of consume -group.
const groupCloseTimeout = 10 * time.Second

// group prints what a group member of topic is given, from the group's
// committed offsets (or reset, OffsetEarliest or OffsetLatest, where there
// are none). It commits what it printed every second and at the end, then
// leaves the group, also when ctx ends (Ctrl-C, SIGTERM), which is then a
// success; when its output fails it leaves without the last commit, so the
// group reads again what it could not print. Without follow it ends once
// every partition it owns is caught up to the high watermark of its first
// answer, and fails when the group gives it no partition, or the agent
// nothing, within r.idle.
func (r *reader) group(ctx context.Context, c *client.Client, group, topic string, reset int64, fetch client.GroupOption) error {
	gc, err := c.NewGroupConsumer(group, []string{topic}, client.WithResetPolicy(reset), client.WithAutoCommitInterval(time.Second), fetch)
	if err != nil {
		return usageError(err)
	}
	end := map[client.TopicPartition]int64{} // without follow: the HW of each partition's first answer
	var runErr error
	printed := true // false once printing what Poll returned failed
	for runErr == nil {
		records, err := r.pollGroup(ctx, gc)
		if err != nil {
			if ctx.Err() == nil {
				runErr = err
			}
			break
		}
		plain := make([]client.Record, len(records))
		for i, rec := range records {
			plain[i] = rec.Record
		}
		// Flushed before the next Poll, whose periodic commit counts
		// these records as consumed.
		if runErr = r.print(plain); runErr != nil {
			printed = false
			break
		}
		if !r.follow && caughtUp(gc.Status(), end) {
			break
		}
	}
	closeCtx, cancel := context.WithTimeout(context.Background(), groupCloseTimeout)
	defer cancel()
	closeGroup := gc.Close
	if !printed {
		// Close would commit past the records it could not print (a
		// full disk under stdout): the group reads them again instead.
		closeGroup = gc.CloseWithoutCommit
	}
	if err := closeGroup(closeCtx); err != nil {
		err = fmt.Errorf("%w: the group reads the records after its last commit again", err)
		return errors.Join(runErr, err)
	}
	return runErr
}

// pollGroup calls one Poll, bounded by r.idle without follow: a member
// that the group gives no partition, or whose partitions' agent does not
// answer, then ends with an error that says which.
func (r *reader) pollGroup(ctx context.Context, gc *client.GroupConsumer) ([]client.GroupRecord, error) {
	if r.follow {
		return gc.Poll(ctx)
	}
	pollCtx, cancel := context.WithTimeout(ctx, r.idle)
	defer cancel()
	records, err := gc.Poll(pollCtx)
	if err != nil && ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded) && len(gc.Assigned()) == 0 {
		return nil, &explained{line: fmt.Sprintf("the group %s gave this member no partition within %s (others may own them all: 'logagent group describe %s' shows who owns what)",
			gc.Group(), r.idle, gc.Group()), err: err}
	}
	return records, err
}

// caughtUp reports whether the member owns partitions and has read each up
// to the high watermark of its first answer, which end keeps.
func caughtUp(status []client.PartitionStatus, end map[client.TopicPartition]int64) bool {
	done := len(status) > 0
	for _, s := range status {
		if s.HighWatermark < 0 || s.Position < 0 {
			done = false
			continue
		}
		e, ok := end[s.TopicPartition]
		if !ok {
			e = s.HighWatermark
			end[s.TopicPartition] = e
		}
		if s.Position < e {
			done = false
		}
	}
	return done
}

// allPartitions is -partition's default: read every partition of the topic.
const allPartitions = -1

func parseStartOffset(s string) (int64, error) {
	switch s {
	case "earliest":
		return client.OffsetEarliest, nil
	case "latest":
		return client.OffsetLatest, nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("%w: -from %q: want earliest, latest or an offset", errUsage, s)
	}
	return n, nil
}

// recordWriter is how -format prints a record of topic.
func recordWriter(format, topic string) (func(*bufio.Writer, client.Record) error, error) {
	switch format {
	case "raw":
		return writeRaw, nil
	case "json", "ndjson":
		return writeNDJSON, nil
	}
	if !strings.Contains(format, "%") {
		return nil, fmt.Errorf("%w: -format %q: want raw, json or a format string with %%-verbs (%%k %%s ...)", errUsage, format)
	}
	parts, err := parseRecordFormat(format)
	if err != nil {
		return nil, fmt.Errorf("%w: -format %q: %v", errUsage, format, err)
	}
	return func(w *bufio.Writer, r client.Record) error {
		b := make([]byte, 0, 64+len(r.Key)+len(r.Value))
		for _, p := range parts {
			b = p(b, topic, r)
		}
		_, err := w.Write(b)
		return err
	}, nil
}

// formatPart appends one piece of a -format string's output.
type formatPart func(b []byte, topic string, r client.Record) []byte

// parseRecordFormat reads a format string in the manner of kcat's -f:
// %-verbs for the record's fields, \n, \t and \\ escapes, the rest as it is.
func parseRecordFormat(f string) ([]formatPart, error) {
	var parts []formatPart
	literal := func(s string) formatPart {
		return func(b []byte, _ string, _ client.Record) []byte { return append(b, s...) }
	}
	var lit strings.Builder
	flush := func() {
		if lit.Len() > 0 {
			parts = append(parts, literal(lit.String()))
			lit.Reset()
		}
	}
	for i := 0; i < len(f); i++ {
		c := f[i]
		if c != '%' && c != '\\' {
			lit.WriteByte(c)
			continue
		}
		if i+1 == len(f) {
			return nil, fmt.Errorf("it ends with a lone %q", c)
		}
		i++
		if c == '\\' {
			switch f[i] {
			case 'n':
				lit.WriteByte('\n')
			case 't':
				lit.WriteByte('\t')
			case '\\':
				lit.WriteByte('\\')
			default:
				return nil, fmt.Errorf("unknown escape \\%c (want \\n, \\t or \\\\)", f[i])
			}
			continue
		}
		var p formatPart
		switch f[i] {
		case '%':
			lit.WriteByte('%')
			continue
		case 't':
			p = func(b []byte, topic string, _ client.Record) []byte { return append(b, topic...) }
		case 'p':
			p = func(b []byte, _ string, r client.Record) []byte { return strconv.AppendInt(b, int64(r.Partition), 10) }
		case 'o':
			p = func(b []byte, _ string, r client.Record) []byte { return strconv.AppendInt(b, r.Offset, 10) }
		case 'k':
			p = func(b []byte, _ string, r client.Record) []byte { return append(b, r.Key...) }
		case 's', 'v':
			p = func(b []byte, _ string, r client.Record) []byte { return append(b, r.Value...) }
		case 'K':
			p = func(b []byte, _ string, r client.Record) []byte { return appendLen(b, r.Key) }
		case 'S':
			p = func(b []byte, _ string, r client.Record) []byte { return appendLen(b, r.Value) }
		case 'T':
			p = func(b []byte, _ string, r client.Record) []byte {
				return strconv.AppendInt(b, r.Timestamp.UnixMilli(), 10)
			}
		case 'h':
			p = appendHeaders
		default:
			return nil, fmt.Errorf("unknown verb %%%c (want %%t %%p %%o %%k %%s %%K %%S %%T %%h or %%%%)", f[i])
		}
		flush()
		parts = append(parts, p)
	}
	flush()
	return parts, nil
}

// appendLen appends a key's or value's length, -1 for null, as kcat does.
func appendLen(b, v []byte) []byte {
	if v == nil {
		return append(b, "-1"...)
	}
	return strconv.AppendInt(b, int64(len(v)), 10)
}

// appendHeaders appends a record's headers as name=value,name=value.
func appendHeaders(b []byte, _ string, r client.Record) []byte {
	for i, h := range r.Headers {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, h.Key...)
		b = append(b, '=')
		b = append(b, h.Value...)
	}
	return b
}

func writeRaw(w *bufio.Writer, r client.Record) error {
	_, _ = w.Write(r.Value)
	return w.WriteByte('\n')
}

// writeNDJSON writes one record as a JSON object on one line, in the shape
// of the agent's ndjson fetch plus the partition:
//
//	{"partition":0,"offset":42,"timestamp":1700000000000,"key":"k","value":"v","headers":{"h":"x"}}
//
// A key or value that is null is null; one that is not valid UTF-8 is given
// as key_base64 or value_base64 instead, and such header values go in a
// "headers_base64" object. A repeated header key keeps its last value.
func writeNDJSON(w *bufio.Writer, r client.Record) error {
	b := []byte(`{"partition":`)
	b = strconv.AppendInt(b, int64(r.Partition), 10)
	b = append(b, `,"offset":`...)
	b = strconv.AppendInt(b, r.Offset, 10)
	b = append(b, `,"timestamp":`...)
	b = strconv.AppendInt(b, r.Timestamp.UnixMilli(), 10)
	b = appendBytesField(b, "key", r.Key)
	b = appendBytesField(b, "value", r.Value)
	if len(r.Headers) > 0 {
		text, binary := map[string]*string{}, map[string]string{}
		for _, h := range r.Headers {
			switch {
			case h.Value == nil:
				text[h.Key] = nil
				delete(binary, h.Key)
			case utf8.Valid(h.Value):
				v := string(h.Value)
				text[h.Key] = &v
				delete(binary, h.Key)
			default:
				binary[h.Key] = base64.StdEncoding.EncodeToString(h.Value)
				delete(text, h.Key)
			}
		}
		if len(text) > 0 {
			b = append(b, `,"headers":`...)
			b = appendJSON(b, text)
		}
		if len(binary) > 0 {
			b = append(b, `,"headers_base64":`...)
			b = appendJSON(b, binary)
		}
	}
	b = append(b, "}\n"...)
	_, err := w.Write(b)
	return err
}

func appendBytesField(b []byte, name string, v []byte) []byte {
	switch {
	case v == nil:
		return append(b, `,"`+name+`":null`...)
	case utf8.Valid(v):
		b = append(b, `,"`+name+`":`...)
		return appendJSON(b, string(v))
	}
	b = append(b, `,"`+name+`_base64":"`...)
	b = base64.StdEncoding.AppendEncode(b, v)
	return append(b, '"')
}

// appendJSON appends v as JSON without escaping <, > and &, which log lines
// often hold. Maps come out with sorted keys.
func appendJSON(b []byte, v any) []byte {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	// Strings and maps of strings always encode.
	_ = enc.Encode(v)
	return append(b, bytes.TrimSuffix(buf.Bytes(), []byte("\n"))...)
}
