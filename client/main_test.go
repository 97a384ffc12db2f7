package client_test

import (
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/logagent/logagent/client"
	"github.com/logagent/logagent/internal/testcluster"
)

// exampleTopics are the topics the examples write, created before they
// run, with their partition counts.
var exampleTopics = map[string]int{
	"events": 3, "payments": 1, "logs": 3, "metrics": 1, "audit": 1, "clicks": 3, "invoices": 2, "signups": 2,
}

// TestMain starts a cluster of real agents (bin/logagent, bin/consul) for
// the examples, whose Output go test checks, unless -run selects none of
// them: it creates their topics and points $LOGAGENT_ADDR at the first
// agent, which is what client.New("") reads.
func TestMain(m *testing.M) {
	flag.Parse()
	if !examplesSelected() {
		os.Exit(m.Run())
	}
	start := time.Now()
	c, err := testcluster.StartMain(testcluster.Options{})
	if err != nil {
		fmt.Fprintf(os.Stderr, "client: the examples' cluster did not start: %v\n", err)
		os.Exit(1)
	}
	err = c.Run(func(c *testcluster.Cluster) error {
		all := []string{"n1", "n2", "n3"}
		for name, partitions := range exampleTopics {
			if err := c.Agents[0].CreateTopic(testcluster.TopicSpec{Name: name, Partitions: partitions, ReplicationFactor: 3, MinInsyncReplicas: 2}); err != nil {
				return fmt.Errorf("create topic %s: %w", name, err)
			}
		}
		for name, partitions := range exampleTopics {
			for p := range partitions {
				c.WaitISR(name, p, all, 30*time.Second)
			}
		}
		return nil
	})
	code := 1
	if err == nil {
		os.Setenv(client.AddrEnv, "http://"+c.Agents[0].ClientAddr)
		if testing.Verbose() {
			fmt.Printf("client: the examples' cluster took %v to start\n", time.Since(start).Round(time.Millisecond))
		}
		code = m.Run()
	} else {
		fmt.Fprintf(os.Stderr, "client: the examples' topics: %v\n", err)
	}
	if err := c.Stop(); err != nil {
		fmt.Fprintf(os.Stderr, "client: the examples' cluster: %v\n", err)
		code = 1
	}
	os.Exit(code)
}

// examplesSelected reports whether -test.run selects an example of this
// package (every one when -test.run is empty), so that a run of unit tests
// only does not wait for a cluster.
func examplesSelected() bool {
	run := flag.Lookup("test.run").Value.String()
	if run == "" {
		return true
	}
	re, err := regexp.Compile(strings.Split(run, "/")[0])
	if err != nil {
		return true // go test reports the pattern
	}
	files, _ := filepath.Glob("*_test.go")
	fset := token.NewFileSet()
	for _, name := range files {
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			return true
		}
		for _, d := range f.Decls {
			if fn, ok := d.(*ast.FuncDecl); ok && fn.Recv == nil && strings.HasPrefix(fn.Name.Name, "Example") && re.MatchString(fn.Name.Name) {
				return true
			}
		}
	}
	return false
}
