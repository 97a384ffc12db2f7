package testcluster

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/logagent/logagent/record"
)

// LogBytesBelow reads a partition directory's segment files, in offset
// order, and returns their bytes up to the end of the last batch that ends
// at or below offset (a high watermark is always a batch boundary). Every
// batch on the way is checked (header and CRC), so what is compared between
// replicas is known to be whole batches, leader epochs included.
func LogBytesBelow(dir string, offset int64) ([]byte, error) {
	segments, err := segmentFiles(dir)
	if err != nil {
		return nil, err
	}
	var out []byte
	next := int64(-1)
	for _, path := range segments {
		data, err := os.ReadFile(path)
		if err != nil {
			return nil, err
		}
		for pos := 0; pos < len(data); {
			batch, _, err := record.NextBatch(data[pos:], 0)
			if err != nil {
				return nil, fmt.Errorf("testcluster: %s at byte %d: %w", path, pos, err)
			}
			h := record.Header(batch)
			if next >= 0 && h.BaseOffset() != next {
				return nil, fmt.Errorf("testcluster: %s at byte %d: batch at offset %d after offset %d", path, pos, h.BaseOffset(), next)
			}
			if h.NextOffset() > offset {
				return out, nil
			}
			out = append(out, batch...)
			next = h.NextOffset()
			pos += len(batch)
		}
	}
	if offset > 0 && next < offset {
		return nil, fmt.Errorf("testcluster: %s ends at offset %d, below %d", dir, next, offset)
	}
	return out, nil
}

// Batches splits bytes of whole batches (a fetch answer, LogBytesBelow)
// into verified batches.
func Batches(b []byte) ([][]byte, error) {
	return record.SplitBatches(b, 0)
}

// segmentFiles lists the *.log files of a partition directory by base
// offset.
func segmentFiles(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	type seg struct {
		base int64
		path string
	}
	var segs []seg
	for _, e := range entries {
		name, ok := strings.CutSuffix(e.Name(), ".log")
		if !ok {
			continue
		}
		base, err := strconv.ParseInt(name, 10, 64)
		if err != nil {
			continue
		}
		segs = append(segs, seg{base, filepath.Join(dir, e.Name())})
	}
	sort.Slice(segs, func(i, j int) bool { return segs[i].base < segs[j].base })
	paths := make([]string, len(segs))
	for i, s := range segs {
		paths[i] = s.path
	}
	return paths, nil
}

// logLinesBetween returns the lines of an agent's log (hclog's text
// format) stamped from from to until that match (every line when match is
// nil), at most limit of them.
func logLinesBetween(path string, from, until time.Time, match func(string) bool, limit int) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	var b strings.Builder
	n := 0
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() && n < limit {
		line := sc.Text()
		stamp, _, ok := strings.Cut(line, " ")
		if !ok {
			continue
		}
		at, err := time.Parse(hclog.TimeFormat, stamp)
		if err != nil || at.Before(from) || at.After(until) || (match != nil && !match(line)) {
			continue
		}
		b.WriteString(line)
		b.WriteByte('\n')
		n++
	}
	return b.String(), sc.Err()
}

// warning matches an hclog line at WARN or ERROR.
func warning(line string) bool {
	return strings.Contains(line, " [WARN] ") || strings.Contains(line, " [ERROR] ")
}
