package config

import (
	_ "embed"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/gohcl"
	"github.com/hashicorp/hcl/v2/hclparse"
	"github.com/hashicorp/hcl/v2/hclsyntax"
)

//go:embed defaults.hcl
var defaultsHCL []byte

// DefaultsSource is the name diagnostics give the embedded defaults.
const DefaultsSource = "<defaults>"

// ErrInvalid is matched by every error Load returns for a configuration that
// could be read but is wrong.
var ErrInvalid = errors.New("config: invalid configuration")

// DiagnosticsError carries every problem found in the configuration. It
// matches ErrInvalid.
type DiagnosticsError struct {
	Diags hcl.Diagnostics
}

func (e *DiagnosticsError) Error() string {
	lines := make([]string, 0, len(e.Diags))
	for _, d := range e.Diags {
		lines = append(lines, FormatDiagnostic(d))
	}
	return fmt.Sprintf("config: %d problem(s):\n%s", len(e.Diags), strings.Join(lines, "\n"))
}

// Is makes errors.Is(err, ErrInvalid) true.
func (e *DiagnosticsError) Is(target error) bool { return target == ErrInvalid }

// FormatDiagnostic renders one diagnostic as "file:line:col: summary: detail".
func FormatDiagnostic(d *hcl.Diagnostic) string {
	where := ""
	if d.Subject != nil {
		where = fmt.Sprintf("%s:%d:%d: ", d.Subject.Filename, d.Subject.Start.Line, d.Subject.Start.Column)
	}
	msg := strings.TrimSuffix(d.Summary, ".")
	if d.Detail != "" {
		msg += ": " + strings.TrimSuffix(d.Detail, ".")
	}
	return where + msg
}

// Environment is what Load reads from outside its sources, besides the
// CONSUL_* variables that Consul's client reads itself. Tests replace it.
type Environment struct {
	// Hostname supplies the default node_id.
	Hostname func() (string, error)
	// InterfaceAddrs supplies the default peer.advertise_address when
	// peer.address listens on every interface, and tells whether an
	// advertise address is this host's (where another listener may take it).
	InterfaceAddrs func() ([]net.Addr, error)
}

// OSEnvironment asks the operating system.
func OSEnvironment() Environment {
	return Environment{Hostname: os.Hostname, InterfaceAddrs: net.InterfaceAddrs}
}

// Load merges the defaults and the given files or directories, in order,
// and validates the result.
func Load(paths ...string) (*Config, error) {
	return LoadWith(OSEnvironment(), paths...)
}

// LoadWith is Load with an explicit environment.
func LoadWith(env Environment, paths ...string) (*Config, error) {
	files, diags := expandPaths(paths)
	merged, ranges, d := parseAndMerge(files)
	diags = append(diags, d...)
	cfg, d := validate(merged, ranges, env)
	diags = append(diags, d...)
	if diags.HasErrors() {
		sortDiagnostics(diags)
		return nil, &DiagnosticsError{Diags: diags}
	}
	cfg.Sources = files
	cfg.startFileDigests = digestStartFiles(cfg)
	return cfg, nil
}

// expandPaths turns each -config argument into files: a file stands for
// itself, a directory for its *.hcl files in name order.
func expandPaths(paths []string) ([]string, hcl.Diagnostics) {
	var files []string
	var diags hcl.Diagnostics
	for _, p := range paths {
		info, err := os.Stat(p)
		if err != nil {
			diags = append(diags, &hcl.Diagnostic{
				Severity: hcl.DiagError,
				Summary:  "Cannot read configuration",
				Detail:   err.Error(),
			})
			continue
		}
		if !info.IsDir() {
			files = append(files, p)
			continue
		}
		entries, err := os.ReadDir(p)
		if err != nil {
			diags = append(diags, &hcl.Diagnostic{
				Severity: hcl.DiagError,
				Summary:  "Cannot read configuration directory",
				Detail:   err.Error(),
			})
			continue
		}
		var names []string
		for _, e := range entries {
			if e.Type().IsRegular() || e.Type()&fs.ModeSymlink != 0 {
				if strings.HasSuffix(e.Name(), ".hcl") {
					names = append(names, e.Name())
				}
			}
		}
		if len(names) == 0 {
			// Read as no configuration at all, an agent on the defaults
			// alone: a directory given by mistake, or its files named
			// *.conf, started one that joined the cluster as the host.
			diags = append(diags, &hcl.Diagnostic{
				Severity: hcl.DiagError,
				Summary:  "Empty configuration directory",
				Detail:   fmt.Sprintf("%s holds no *.hcl file (files with other names are not read)", p),
			})
			continue
		}
		sort.Strings(names)
		for _, n := range names {
			files = append(files, filepath.Join(p, n))
		}
	}
	return files, diags
}

// rangeMap records, for each dotted key ("storage.segment_bytes"), where the
// value that won the merge was written.
type rangeMap map[string]hcl.Range

func parseAndMerge(files []string) (*fileRoot, rangeMap, hcl.Diagnostics) {
	parser := hclparse.NewParser()
	merged := &fileRoot{}
	ranges := rangeMap{}
	var diags hcl.Diagnostics

	decode := func(name string, src []byte) {
		f, d := parser.ParseHCL(src, name)
		diags = append(diags, d...)
		if d.HasErrors() {
			return
		}
		var root fileRoot
		// An unknown key or a value of the wrong type is reported, but the
		// keys that did decode are still merged and validated, so that one
		// run reports every problem.
		d = gohcl.DecodeBody(f.Body, nil, &root)
		diags = append(diags, d...)
		fileRanges := rangeMap{}
		if body, ok := f.Body.(*hclsyntax.Body); ok {
			collectRanges(body, "", fileRanges)
		}
		// A value that did not decode (a number that is not whole, a
		// variable or a function call) left its key set to a zero value,
		// which validation then reported a second time, as a value the
		// file does not hold ("0 is outside the allowed range" for 3.5):
		// the key is dropped from this file, so the earlier value stands.
		for key, r := range fileRanges {
			if decodeFailed(d, r) {
				clearKey(reflect.ValueOf(&root).Elem(), key)
				continue
			}
			ranges[key] = r
		}
		mergeInto(reflect.ValueOf(merged).Elem(), reflect.ValueOf(&root).Elem())
	}

	decode(DefaultsSource, defaultsHCL)
	for _, name := range files {
		src, err := os.ReadFile(name)
		if err != nil {
			diags = append(diags, &hcl.Diagnostic{
				Severity: hcl.DiagError,
				Summary:  "Cannot read configuration",
				Detail:   err.Error(),
			})
			continue
		}
		decode(name, src)
	}
	return merged, ranges, diags
}

func collectRanges(body *hclsyntax.Body, prefix string, into rangeMap) {
	for name, attr := range body.Attributes {
		into[prefix+name] = attr.Expr.Range()
	}
	for _, b := range body.Blocks {
		into[prefix+b.Type] = b.TypeRange
		collectRanges(b.Body, prefix+b.Type+".", into)
	}
}

// decodeFailed reports whether an error of diags lies in the value written
// at r.
func decodeFailed(diags hcl.Diagnostics, r hcl.Range) bool {
	for _, d := range diags {
		if d.Severity == hcl.DiagError && d.Subject != nil && d.Subject.Filename == r.Filename &&
			(d.Subject.Start.Byte == r.Start.Byte || r.ContainsOffset(d.Subject.Start.Byte)) {
			return true
		}
	}
	return false
}

// clearKey unsets the dotted key ("storage.segment_bytes") of a decoded
// file; a key that names a block or is not in the schema is left alone.
func clearKey(v reflect.Value, key string) {
	name, rest, nested := strings.Cut(key, ".")
	for i := 0; i < v.NumField(); i++ {
		if strings.Split(v.Type().Field(i).Tag.Get("hcl"), ",")[0] != name {
			continue
		}
		f := v.Field(i)
		if f.Kind() != reflect.Pointer || f.IsNil() {
			return
		}
		if f.Elem().Kind() == reflect.Struct {
			if nested {
				clearKey(f.Elem(), rest)
			}
			return
		}
		if !nested {
			f.Set(reflect.Zero(f.Type()))
		}
		return
	}
}

// mergeInto copies every field set in src over dst. Blocks merge key by key,
// so a later file that sets storage.durability keeps the earlier
// storage.segment_bytes.
func mergeInto(dst, src reflect.Value) {
	for i := 0; i < src.NumField(); i++ {
		s := src.Field(i)
		if s.Kind() != reflect.Pointer || s.IsNil() {
			continue
		}
		d := dst.Field(i)
		if s.Elem().Kind() == reflect.Struct {
			if d.IsNil() {
				d.Set(reflect.New(s.Elem().Type()))
			}
			mergeInto(d.Elem(), s.Elem())
			continue
		}
		d.Set(s)
	}
}

// sortDiagnostics orders diagnostics by file, line and column, those without
// a place last, so a reader can walk a file top to bottom.
func sortDiagnostics(diags hcl.Diagnostics) {
	sort.SliceStable(diags, func(i, j int) bool {
		a, b := diags[i].Subject, diags[j].Subject
		switch {
		case a == nil || b == nil:
			return a != nil && b == nil
		case a.Filename != b.Filename:
			return a.Filename < b.Filename
		case a.Start.Line != b.Start.Line:
			return a.Start.Line < b.Start.Line
		default:
			return a.Start.Column < b.Start.Column
		}
	})
}
