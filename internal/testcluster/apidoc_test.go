package testcluster

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/logagent/logagent/internal/testenv"
)

// apiDoc is the document whose examples TestAPIDocExamples runs.
const apiDoc = "docs/api.md"

// fieldsMarker, on the line before an example's fence, says that its answer
// shows one cluster's state: only its fields are checked, not its values.
const fieldsMarker = "<!-- example: fields -->"

// docExample is one command line of an sh block and the answer shown
// under it.
type docExample struct {
	line    int    // in the document
	command string // continuation lines joined
	answer  []string
	fields  bool
}

// varyingKeys hold values that differ from run to run (ids, times, epochs,
// Consul's index): the examples show one run's.
var varyingKeys = map[string]bool{
	"id": true, "producer_id": true, "member_id": true, "timestamp": true,
	"epoch": true, "metadata_index": true, "time_unix_ms": true, "commit_time_ms": true,
}

// boundKeys are the varyingKeys whose values later examples send back (the
// producer id of an epoch bump, a member's id): where this run's differs
// from the document's, later commands get this run's in its place.
var boundKeys = map[string]bool{"producer_id": true, "member_id": true}

// TestAPIDocExamples runs every curl example of docs/api.md as written,
// with curl, in the document's order (those that delete last, so that the
// later examples find the topic), against a three-agent cluster whose n1
// stands for the examples' 127.0.0.1:7070, and one TLS agent with a client
// token for the https examples at 10.0.0.11:7070. Each answer must have a
// status that fits it (checkStatuses), the fields the document shows, and
// their values, except varyingKeys and
// where the document marks the example with fieldsMarker; a JSON string
// written "..." at its end, or an array ending in ",...", stands for any.
func TestAPIDocExamples(t *testing.T) {
	if _, err := exec.LookPath("curl"); err != nil {
		testenv.SkipUnlessCI(t, "!!! NO CURL: %s IS SKIPPED; install it as root with `make curl` (apt-get install curl)", t.Name())
	}
	examples := readDocExamples(t, filepath.Join(moduleRoot, apiDoc))
	// Every block that mentions curl is an example this test runs.
	if len(examples) < 20 {
		t.Fatalf("%s: only %d curl examples found", apiDoc, len(examples))
	}
	slices.SortStableFunc(examples, func(a, b docExample) int {
		return boolInt(strings.Contains(a.command, "-XDELETE")) - boolInt(strings.Contains(b.command, "-XDELETE"))
	})

	c := Start(t, Options{HCL: "client {\n  pprof = true\n}\n"})
	secure := Start(t, Options{Agents: 1, Security: Security{ClientTLS: true, ClientToken: "s3cret-client-token"}})
	if err := secure.Agents[0].CreateTopic(TopicSpec{Name: "orders", Partitions: 1, ReplicationFactor: 1, MinInsyncReplicas: 1}); err != nil {
		t.Fatal(err)
	}

	// The examples' files: the TLS example's CA and token, the photo.
	work := t.TempDir()
	copyFile(t, secure.CAFile, filepath.Join(work, "ca.pem"))
	copyFile(t, secure.clientTokenFile, filepath.Join(work, "client-token"))
	if err := os.WriteFile(filepath.Join(work, "photo.jpg"), []byte{0xff, 0xd8, 0xff, 0xe0}, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(work, ".curlrc"), []byte(`write-out = "%{stderr}`+statusMark+`%{http_code}\n"`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}

	// The examples' addresses and this run's.
	toRun := strings.NewReplacer(
		"http://127.0.0.1:7070", "http://"+c.Agents[0].ClientAddr,
		"https://10.0.0.11:7070", "https://"+secure.Agents[0].ClientAddr,
	)
	var fromRun []string
	for i, a := range c.Agents {
		fromRun = append(fromRun, a.ClientAddr, "127.0.0.1:7070", a.PeerAdvertise, fmt.Sprintf("10.0.0.%d:7171", i+1))
	}
	fromRun = append(fromRun, secure.Agents[0].ClientAddr, "10.0.0.11:7070")
	back := strings.NewReplacer(fromRun...)

	bound := map[string]string{}
	for _, ex := range examples {
		command := toRun.Replace(ex.command)
		for doc, run := range bound {
			command = strings.ReplaceAll(command, doc, run)
		}
		cmd := exec.Command("sh", "-c", command)
		cmd.Dir = work
		// curl reads work/.curlrc, which writes each answer's status to
		// stderr, leaving the output the document shows as it is.
		cmd.Env = append(os.Environ(), "CURL_HOME="+work)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Errorf("%s:%d: %s\n%v: %s", apiDoc, ex.line, ex.command, err, stderr.String())
			continue
		}
		got := back.Replace(string(out))
		if problem := checkStatuses(ex, stderr.String()); problem != "" {
			t.Errorf("%s:%d: %s\n%s", apiDoc, ex.line, ex.command, problem)
		}
		if problems := compareAnswer(ex, got, bound); len(problems) > 0 {
			t.Errorf("%s:%d: %s\nthe answer\n%s\ndiffers from the document's\n%s\n%s", apiDoc, ex.line, ex.command,
				got, strings.Join(ex.answer, "\n"), strings.Join(problems, "\n"))
		}
		if m := regexp.MustCompile(`-o (\S+)`).FindStringSubmatch(ex.command); m != nil && m[1] != "/dev/null" {
			if st, err := os.Stat(filepath.Join(work, m[1])); err != nil || st.Size() == 0 {
				t.Errorf("%s:%d: %s wrote no %s: %v", apiDoc, ex.line, ex.command, m[1], err)
			}
		}
		settle(t, c)
	}
	t.Logf("%d examples of %s run", len(examples), apiDoc)
}

// settle waits until every partition of the cluster's topics is led by its
// preferred replica with every replica in the ISR and at the leader's high
// watermark, as the examples show a cluster at rest: the next example then
// sees what this one created or wrote on every agent.
func settle(t *testing.T, c *Cluster) {
	t.Helper()
	var topics struct {
		Topics []string `json:"topics"`
	}
	if err := c.Agents[0].do("GET", c.Agents[0].url("/v1/topics", nil), "", nil, &topics); err != nil {
		t.Fatal(err)
	}
	byNode := map[string]*Agent{}
	for _, a := range c.Agents {
		byNode[a.NodeID] = a
	}
	for _, topic := range topics.Topics {
		if strings.HasPrefix(topic, "__") {
			continue
		}
		c.WaitFor(30*time.Second, "topic "+topic+" at rest", func() bool {
			desc, err := c.Agents[0].Describe(topic)
			if err != nil {
				return false
			}
			for _, p := range desc.Partitions {
				leader, err := byNode[p.Replicas[0]].DescribePartition(topic, p.Partition)
				if err != nil || leader.Role != "leader" || leader.HighWatermark == nil ||
					!slices.Equal(slices.Sorted(slices.Values(leader.ISR)), slices.Sorted(slices.Values(p.Replicas))) {
					return false
				}
				for _, r := range p.Replicas[1:] {
					f, err := byNode[r].DescribePartition(topic, p.Partition)
					if err != nil || f.HighWatermark == nil || *f.HighWatermark != *leader.HighWatermark {
						return false
					}
				}
			}
			return true
		})
	}
}

// statusMark starts the line .curlrc has curl write to stderr for each
// answer: its status code.
const statusMark = "answer status "

// checkStatuses checks the status of a command's answers, which the
// document shows only as a body (or, with -D or -w, itself, where the
// output says): an error object comes with a 4xx or 5xx, anything else
// with a 2xx.
func checkStatuses(ex docExample, stderr string) string {
	if strings.Contains(ex.command, " -w ") || strings.Contains(ex.command, " -D ") {
		return ""
	}
	var statuses []int
	for _, line := range strings.Split(stderr, "\n") {
		if s, ok := strings.CutPrefix(line, statusMark); ok {
			n, err := strconv.Atoi(s)
			if err != nil {
				return "unreadable status line " + line
			}
			statuses = append(statuses, n)
		}
	}
	if strings.Contains(ex.command, "curl ") && len(statuses) != strings.Count(ex.command, "curl ") {
		return fmt.Sprintf("%d status lines for %d curl commands: %s", len(statuses), strings.Count(ex.command, "curl "), stderr)
	}
	isError := strings.HasPrefix(strings.Join(ex.answer, ""), `{"error":`)
	for _, status := range statuses {
		if ok := status >= 200 && status < 300; ok == isError {
			return fmt.Sprintf("status %d for an answer the document shows as %s", status, strings.Join(ex.answer, "\n"))
		}
	}
	return ""
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// readDocExamples reads the "$ " command lines of the document's sh blocks
// and the answers under them, and fails on a block that mentions curl
// without being such a block, so that no example goes unrun.
func readDocExamples(t *testing.T, path string) []docExample {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var (
		examples []docExample
		cur      *docExample
		inBlock  bool
		isSh     bool
		fields   bool
		prev     string
		blockAt  int
		block    []string
	)
	sc := bufio.NewScanner(bytes.NewReader(b))
	n := 0
	flush := func() {
		if cur != nil {
			examples = append(examples, *cur)
			cur = nil
		}
	}
	for sc.Scan() {
		n++
		line := sc.Text()
		if strings.HasPrefix(line, "```") {
			if !inBlock {
				inBlock, isSh, blockAt, block = true, line == "```sh", n, nil
				fields = strings.TrimSpace(prev) == fieldsMarker
				continue
			}
			flush()
			inBlock = false
			if !isSh && strings.Contains(strings.Join(block, "\n"), "curl ") {
				t.Errorf("%s:%d: a block with a curl command that is not an sh block of \"$ \" lines: it would not be run", path, blockAt)
			}
			continue
		}
		prev = line
		if !inBlock {
			continue
		}
		block = append(block, line)
		if !isSh {
			continue
		}
		switch {
		case strings.HasPrefix(line, "$ "):
			flush()
			cur = &docExample{line: n, command: strings.TrimPrefix(line, "$ "), fields: fields}
		case cur == nil:
			t.Errorf("%s:%d: an sh block line before any \"$ \" command: %q", path, n, line)
		case strings.HasSuffix(cur.command, "\\") && len(cur.answer) == 0:
			cur.command = strings.TrimSuffix(cur.command, "\\") + " " + strings.TrimSpace(line)
		default:
			cur.answer = append(cur.answer, line)
		}
	}
	return examples
}

// compareAnswer checks an answer against the document's and binds the
// values of varyingKeys that differ.
func compareAnswer(ex docExample, got string, bound map[string]string) []string {
	want := strings.Join(ex.answer, "\n")
	gotLines := strings.Split(strings.TrimRight(strings.ReplaceAll(got, "\r\n", "\n"), "\n"), "\n")
	if strings.TrimSpace(got) == "" {
		gotLines = nil
	}
	switch {
	case len(ex.answer) == 0:
		if len(gotLines) > 0 {
			return []string{"the document shows no answer"}
		}
		return nil
	case strings.HasPrefix(want, "{") || strings.HasPrefix(want, "["):
		wantValues, err := decodeDocJSON(want)
		if err != nil {
			return []string{"the document's JSON: " + err.Error()}
		}
		gotValues, err := decodeDocJSON(got)
		if err != nil {
			return []string{"the answer's JSON: " + err.Error()}
		}
		if len(wantValues) != len(gotValues) {
			return []string{fmt.Sprintf("%d JSON values, the document shows %d", len(gotValues), len(wantValues))}
		}
		var problems []string
		for i := range wantValues {
			compareJSON(fmt.Sprintf("value %d", i+1), "", wantValues[i], gotValues[i], ex.fields, bound, &problems)
		}
		return problems
	default:
		return compareLines(ex, gotLines)
	}
}

// compareLines compares an answer of text lines: the same lines in order,
// or, for HTTP headers (curl -D -) and a document ending in "...", the
// document's lines among the answer's. With fields, a line is compared up
// to its last space (a Prometheus series without its value).
func compareLines(ex docExample, got []string) []string {
	key := func(s string) string {
		s = strings.TrimSpace(s)
		if i := strings.LastIndex(s, " "); ex.fields && i > 0 {
			return s[:i]
		}
		return s
	}
	want := ex.answer
	subset := strings.HasPrefix(want[0], "HTTP/")
	if want[len(want)-1] == "..." {
		want, subset = want[:len(want)-1], true
	}
	if !subset {
		if len(got) != len(want) {
			return []string{fmt.Sprintf("%d lines, the document shows %d", len(got), len(want))}
		}
		var problems []string
		for i := range want {
			if key(got[i]) != key(want[i]) {
				problems = append(problems, fmt.Sprintf("line %d is %q, the document shows %q", i+1, got[i], want[i]))
			}
		}
		return problems
	}
	have := map[string]bool{}
	for _, g := range got {
		have[key(g)] = true
	}
	var problems []string
	for _, w := range want {
		if !have[key(w)] {
			problems = append(problems, fmt.Sprintf("no line %q", w))
		}
	}
	return problems
}

// anyString and moreElements stand for the document's placeholders.
const (
	anyString    = "<any string>"
	moreElements = "<more elements>"
)

var (
	placeholderString = regexp.MustCompile(`"[^"]*\.\.\."`)
	placeholderMore   = regexp.MustCompile(`,\s*\.\.\.\s*\]`)
)

// decodeDocJSON reads every JSON value of s, the document's placeholders
// replaced.
func decodeDocJSON(s string) ([]any, error) {
	s = placeholderString.ReplaceAllString(s, `"`+anyString+`"`)
	s = placeholderMore.ReplaceAllString(s, `,"`+moreElements+`"]`)
	dec := json.NewDecoder(strings.NewReader(s))
	dec.UseNumber()
	var values []any
	for dec.More() {
		var v any
		if err := dec.Decode(&v); err != nil {
			return nil, err
		}
		values = append(values, v)
	}
	return values, nil
}

func compareJSON(path, key string, want, got any, fields bool, bound map[string]string, problems *[]string) {
	fail := func(format string, args ...any) {
		*problems = append(*problems, path+": "+fmt.Sprintf(format, args...))
	}
	if w, ok := want.(string); ok && w == anyString {
		if _, ok := got.(string); !ok {
			fail("%v is not a string", got)
		}
		return
	}
	if reflect.TypeOf(want) != reflect.TypeOf(got) {
		fail("%v (%T), the document shows %v (%T)", got, got, want, want)
		return
	}
	switch w := want.(type) {
	case map[string]any:
		g := got.(map[string]any)
		for k := range w {
			if _, ok := g[k]; !ok {
				fail("no field %q", k)
			}
		}
		for k := range g {
			if _, ok := w[k]; !ok {
				fail("a field %q the document does not show", k)
			}
		}
		for k, wv := range w {
			if gv, ok := g[k]; ok {
				compareJSON(path+"."+k, k, wv, gv, fields, bound, problems)
			}
		}
	case []any:
		g := got.([]any)
		more := len(w) > 0 && w[len(w)-1] == moreElements
		if more {
			w = w[:len(w)-1]
		}
		n := len(w)
		switch {
		case fields:
			// How many there are is the cluster's state too.
			n = min(n, len(g))
		case len(g) < len(w) || (!more && len(g) > len(w)):
			fail("%d elements, the document shows %d", len(g), len(w))
			return
		}
		for i := range n {
			compareJSON(fmt.Sprintf("%s[%d]", path, i), key, w[i], g[i], fields, bound, problems)
		}
	default:
		if fields || reflect.DeepEqual(want, got) {
			return
		}
		if varyingKeys[key] {
			if boundKeys[key] {
				bound[fmt.Sprint(want)] = fmt.Sprint(got)
			}
			return
		}
		fail("%v, the document shows %v", got, want)
	}
}
