package agent

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/valyala/fasthttp"
)

// statusByName are the fasthttp status constants the agent answers with.
var statusByName = map[string]int{
	"StatusBadRequest":                   fasthttp.StatusBadRequest,
	"StatusUnauthorized":                 fasthttp.StatusUnauthorized,
	"StatusForbidden":                    fasthttp.StatusForbidden,
	"StatusNotFound":                     fasthttp.StatusNotFound,
	"StatusMethodNotAllowed":             fasthttp.StatusMethodNotAllowed,
	"StatusNotAcceptable":                fasthttp.StatusNotAcceptable,
	"StatusConflict":                     fasthttp.StatusConflict,
	"StatusPreconditionFailed":           fasthttp.StatusPreconditionFailed,
	"StatusRequestEntityTooLarge":        fasthttp.StatusRequestEntityTooLarge,
	"StatusUnsupportedMediaType":         fasthttp.StatusUnsupportedMediaType,
	"StatusRequestedRangeNotSatisfiable": fasthttp.StatusRequestedRangeNotSatisfiable,
	"StatusInternalServerError":          fasthttp.StatusInternalServerError,
	"StatusBadGateway":                   fasthttp.StatusBadGateway,
	"StatusServiceUnavailable":           fasthttp.StatusServiceUnavailable,
	"StatusGatewayTimeout":               fasthttp.StatusGatewayTimeout,
	"StatusInsufficientStorage":          fasthttp.StatusInsufficientStorage,
}

// TestErrorTableListsEveryAnswer: every status and error code the agent's
// code pairs in one call (reply.WriteError, reply.NewAPIError and the like: a
// fasthttp.Status constant followed by a wire.Code constant, or a variable
// the function sets to such constants, among the arguments) is in
// docs/api.md's table of errors, under that status, so the
// table cannot miss an answer the API gives (it missed 500 and 502
// internal, 500 storage_error, and more).
func TestErrorTableListsEveryAnswer(t *testing.T) {
	codes := wireCodes(t, "../wire/wire.go")
	documented := errorTable(t, "../docs/api.md")
	fset := token.NewFileSet()
	// The agent's handlers, the peer API's server (agent/peerapi), the
	// answers they share (agent/reply), the group routing (agent/groups),
	// whose answers the handlers write, the Kafka listener's broker
	// (agent/kafkabroker), which answers the same errors, and the status
	// page's, which the client API serves.
	var files []string
	for _, pattern := range []string{"*.go", "peerapi/*.go", "reply/*.go", "groups/*.go", "kafkabroker/*.go", "../ui/*.go"} {
		matched, err := filepath.Glob(pattern)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, matched...)
	}
	pairs := 0
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		// A code passed as a variable is each wire.Code the function
		// assigns to it (producerAPIError's).
		var assigned map[string][]string
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.FuncDecl:
				assigned = map[string][]string{}
				ast.Inspect(n, func(m ast.Node) bool {
					if as, ok := m.(*ast.AssignStmt); ok && len(as.Lhs) == len(as.Rhs) {
						for i, lhs := range as.Lhs {
							id, ok := lhs.(*ast.Ident)
							name, isCode := selector(as.Rhs[i], "wire")
							if ok && isCode && strings.HasPrefix(name, "Code") {
								assigned[id.Name] = append(assigned[id.Name], name)
							}
						}
					}
					return true
				})
			case *ast.CallExpr:
				for i := 0; i+1 < len(n.Args); i++ {
					status, ok := selector(n.Args[i], "fasthttp")
					if !ok || !strings.HasPrefix(status, "Status") {
						continue
					}
					var codeNames []string
					if name, ok := selector(n.Args[i+1], "wire"); ok && strings.HasPrefix(name, "Code") {
						codeNames = []string{name}
					} else if id, ok := n.Args[i+1].(*ast.Ident); ok {
						codeNames = assigned[id.Name]
					}
					for _, codeName := range codeNames {
						number, ok := statusByName[status]
						if !ok {
							t.Errorf("%s: fasthttp.%s is not in statusByName: add it", fset.Position(n.Pos()), status)
							continue
						}
						code, ok := codes[codeName]
						if !ok {
							t.Errorf("%s: wire.%s is no string constant of wire/wire.go", fset.Position(n.Pos()), codeName)
							continue
						}
						pairs++
						if !documented[number][code] {
							t.Errorf("%s: %d %s is answered but not in docs/api.md's error table", fset.Position(n.Pos()), number, code)
						}
					}
				}
			}
			return true
		})
	}
	if pairs < 50 {
		t.Fatalf("found only %d status and code pairs in the agent's code: the scan no longer sees them", pairs)
	}
}

// selector returns name for pkg.name.
func selector(e ast.Expr, pkg string) (string, bool) {
	sel, ok := e.(*ast.SelectorExpr)
	if !ok {
		return "", false
	}
	id, ok := sel.X.(*ast.Ident)
	if !ok || id.Name != pkg {
		return "", false
	}
	return sel.Sel.Name, true
}

// wireCodes reads the string constants of the wire package's file.
func wireCodes(t *testing.T, path string) map[string]string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), path, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	codes := map[string]string{}
	for _, d := range f.Decls {
		gen, ok := d.(*ast.GenDecl)
		if !ok || gen.Tok != token.CONST {
			continue
		}
		for _, spec := range gen.Specs {
			vs := spec.(*ast.ValueSpec)
			for i, name := range vs.Names {
				if i >= len(vs.Values) {
					continue
				}
				if lit, ok := vs.Values[i].(*ast.BasicLit); ok && lit.Kind == token.STRING {
					if s, err := strconv.Unquote(lit.Value); err == nil {
						codes[name.Name] = s
					}
				}
			}
		}
	}
	return codes
}

// errorTable reads docs/api.md's "| status | codes |" table: the codes in
// backquotes on each status's row.
func errorTable(t *testing.T, path string) map[int]map[string]bool {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	table := map[int]map[string]bool{}
	in := false
	row := regexp.MustCompile(`^\| (\d{3}) \|(.*)\|$`)
	quoted := regexp.MustCompile("`([a-z_]+)`")
	for _, line := range strings.Split(string(b), "\n") {
		switch {
		case line == "| status | codes |":
			in = true
		case in && strings.HasPrefix(line, "|---"):
		case in && row.MatchString(line):
			m := row.FindStringSubmatch(line)
			status, _ := strconv.Atoi(m[1])
			table[status] = map[string]bool{}
			for _, q := range quoted.FindAllStringSubmatch(m[2], -1) {
				table[status][q[1]] = true
			}
		case in:
			if len(table) == 0 {
				t.Fatalf("%s: the error table has no rows", path)
			}
			return table
		}
	}
	t.Fatalf("%s: no \"| status | codes |\" table", path)
	return nil
}
