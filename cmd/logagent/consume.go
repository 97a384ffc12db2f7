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
// more until ctx ends (Ctrl-C), which is then a success. Records of one
// partition come in offset order; partitions interleave.
func consume(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("consume", stderr)
	topic := fs.String("topic", "", "the topic to read (required)")
	partition := fs.Int("partition", allPartitions, "the partition to read (default: every partition)")
	group := fs.String("group", "", "read as a member of this consumer group the partitions it is given, from the group's committed offsets, committing every second and on exit")
	fromFlag := fs.String("from", "earliest", "where to start: earliest, latest or an offset (with -group: where a partition the group has no committed offset of starts)")
	follow := fs.Bool("follow", false, "keep waiting for new records (until Ctrl-C)")
	format := fs.String("format", "raw", "raw (each value on a line) or ndjson (one JSON object per record)")
	maxBytes := fs.Int("max-bytes", 1<<20, "max_bytes of each fetch")
	wait := fs.Duration("wait", 5*time.Second, "with -follow, how long each fetch waits on the agent for records")
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
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
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
	var write func(*bufio.Writer, client.Record) error
	switch *format {
	case "raw":
		write = writeRaw
	case "ndjson":
		write = writeNDJSON
	default:
		return fmt.Errorf("%w: -format %q: want raw or ndjson", errUsage, *format)
	}
	c, err := newAgentClient(addr, nil)
	if err != nil {
		return err
	}
	fetchWait := time.Duration(0)
	if *follow {
		fetchWait = *wait
	}
	if err := checkAgent(ctx, c); err != nil {
		return err
	}
	if *group != "" {
		// The topic is looked up first so that a wrong name fails at
		// once instead of leaving a member waiting for partitions.
		if _, err := c.DescribeTopic(ctx, *topic); err != nil {
			return usageError(err)
		}
		return consumeGroup(ctx, c, *group, *topic, from, *follow, client.WithFetchOptions(client.WithFetchMaxBytes(*maxBytes), client.WithFetchMaxWait(fetchWait)), write, stdout)
	}
	partitions := []int{*partition}
	if *partition == allPartitions {
		info, err := c.DescribeTopic(ctx, *topic)
		if err != nil {
			return err
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

	out := bufio.NewWriter(stdout)
	defer out.Flush()
	var outMu sync.Mutex
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errs := make([]error, len(consumers))
	var wg sync.WaitGroup
	for i, cons := range consumers {
		wg.Go(func() {
			errs[i] = consumePartition(ctx, cons, *follow, func(records []client.Record) error {
				outMu.Lock()
				defer outMu.Unlock()
				for _, r := range records {
					if err := write(out, r); err != nil {
						return err
					}
				}
				return out.Flush()
			})
			if errs[i] != nil {
				cancel() // one partition failing ends the others: exit 1 at once
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil && !errors.Is(err, context.Canceled) {
			return err
		}
	}
	return nil
}

// groupCloseTimeout bounds the last commit and the leave of consume -group.
const groupCloseTimeout = 10 * time.Second

// consumeGroup prints what a group member of topic is given, from the
// group's committed offsets (or reset, OffsetEarliest or OffsetLatest,
// where there are none). It commits what it printed every second and at
// the end, then leaves the group, also when ctx ends (Ctrl-C, SIGTERM),
// which is then a success. Without follow it ends once every partition it
// owns is caught up to the high watermark of its first fetch.
func consumeGroup(ctx context.Context, c *client.Client, group, topic string, reset int64, follow bool, fetch client.GroupOption,
	write func(*bufio.Writer, client.Record) error, stdout io.Writer) error {
	gc, err := c.NewGroupConsumer(group, []string{topic}, client.WithResetPolicy(reset), client.WithAutoCommitInterval(time.Second), fetch)
	if err != nil {
		return usageError(err)
	}
	out := bufio.NewWriter(stdout)
	end := map[client.TopicPartition]int64{} // without follow: the HW of each partition's first answer
	var runErr error
	for runErr == nil {
		records, err := gc.Poll(ctx)
		if err != nil {
			if ctx.Err() == nil {
				runErr = err
			}
			break
		}
		for _, r := range records {
			if runErr = write(out, r.Record); runErr != nil {
				break
			}
		}
		// Flushed before the next Poll, whose periodic commit counts
		// these records as consumed.
		if err := out.Flush(); runErr == nil {
			runErr = err
		}
		if !follow && caughtUp(gc.Status(), end) {
			break
		}
	}
	closeCtx, cancel := context.WithTimeout(context.Background(), groupCloseTimeout)
	defer cancel()
	if err := gc.Close(closeCtx); err != nil {
		err = fmt.Errorf("%w: the group reads the records after its last commit again", err)
		return errors.Join(runErr, err)
	}
	return runErr
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

// consumePartition hands print one partition's records. Without follow it
// stops at the high watermark of its first fetch; with follow it runs until
// ctx ends, which is then no error.
func consumePartition(ctx context.Context, cons *client.Consumer, follow bool, print func([]client.Record) error) error {
	end := int64(-1) // without follow: the high watermark of the first fetch
	for {
		records, err := cons.Poll(ctx)
		if err != nil {
			if follow && ctx.Err() != nil {
				return nil
			}
			return err
		}
		if !follow && end < 0 {
			end = cons.HighWatermark()
		}
		if !follow {
			n := 0
			for n < len(records) && records[n].Offset < end {
				n++
			}
			records = records[:n]
		}
		if err := print(records); err != nil {
			return err
		}
		if !follow && cons.Position() >= end {
			return nil
		}
	}
}

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
			case utf8.Valid(h.Value):
				v := string(h.Value)
				text[h.Key] = &v
			default:
				binary[h.Key] = base64.StdEncoding.EncodeToString(h.Value)
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
