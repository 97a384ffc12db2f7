package config

import (
	"bytes"
	"crypto/sha256"
	"os"
	"reflect"
	"strings"
)

// Changed returns the settings whose values differ between a and b, named
// as a configuration file spells them ("storage.retention", "client.tls"
// for a TLS block turned on or off), in the order of the file schema. It
// compares values, not text: "168h" and "10080m" are the same retention,
// and a default written out is no change. A file the agent reads only at
// start (a token file, Consul's TLS files) counts as changed when it was
// rewritten in place between the two loads. It names keys only, never their
// values (consul.token is a secret).
//
// A running agent applies few settings without a restart (docs/operations.md,
// "Start, stop, reload"); a reload uses this to say which of the others it
// was given and ignored, instead of ignoring them silently.
func Changed(a, b *Config) []string {
	var out []string
	rewritten := func(key string) bool { return a.startFileDigests[key] != b.startFileDigests[key] }
	changedIn(reflect.TypeFor[fileRoot](), reflect.ValueOf(*a), reflect.ValueOf(*b), "", rewritten, &out)
	return out
}

// changedIn compares a and b, values of a Config struct, over the keys of
// the schema block type block, appending the names under prefix that
// differ, or whose file was rewritten.
func changedIn(block reflect.Type, a, b reflect.Value, prefix string, rewritten func(key string) bool, out *[]string) {
	for i := range block.NumField() {
		key := block.Field(i)
		name := prefix + strings.Split(key.Tag.Get("hcl"), ",")[0]
		va, okA := settingValue(a, key.Name)
		vb, okB := settingValue(b, key.Name)
		if !okA || !okB {
			continue // TestChangedKnowsEveryKey keeps this from happening
		}
		if strings.Contains(key.Tag.Get("hcl"), ",block") {
			if va.Kind() == reflect.Pointer {
				if va.IsNil() != vb.IsNil() {
					*out = append(*out, name)
					continue
				}
				if va.IsNil() {
					continue
				}
				va, vb = va.Elem(), vb.Elem()
			}
			changedIn(key.Type.Elem(), va, vb, name+".", rewritten, out)
			continue
		}
		if !reflect.DeepEqual(va.Interface(), vb.Interface()) || rewritten(name) {
			*out = append(*out, name)
		}
	}
}

// settingValue finds the value of the schema key named field in v, a Config
// struct: its field of that name, or, for the consul block, the field of the
// Consul client configuration it fills (consul.address is API.Address,
// consul.ca_file API.TLSConfig.CAFile), searched breadth-first.
func settingValue(v reflect.Value, field string) (reflect.Value, bool) {
	queue := []reflect.Value{v}
	for len(queue) > 0 {
		s := queue[0]
		queue = queue[1:]
		if f := s.FieldByName(field); f.IsValid() {
			return f, true
		}
		for i := range s.NumField() {
			f := s.Field(i)
			if f.Kind() == reflect.Pointer && !f.IsNil() && f.Elem().Kind() == reflect.Struct && s.Type().Field(i).IsExported() {
				f = f.Elem()
			}
			if f.Kind() == reflect.Struct && s.Type().Field(i).IsExported() {
				queue = append(queue, f)
			}
		}
	}
	return reflect.Value{}, false
}

// startFiles names the files of c that the agent reads once, at start, by
// the key that sets them: a reload applies neither a rotated token nor a
// renewed Consul certificate (peer.tls and client.tls are reloaded, and are
// not here). consul.token_file and the consul TLS files may come from
// CONSUL_* variables rather than the consul block.
func startFiles(c *Config) map[string]string {
	return map[string]string{
		"peer.token_file":   c.Peer.TokenFile,
		"client.token_file": c.Client.TokenFile,
		"consul.token_file": c.Consul.API.TokenFile,
		"consul.ca_file":    c.Consul.API.TLSConfig.CAFile,
		"consul.cert_file":  c.Consul.API.TLSConfig.CertFile,
		"consul.key_file":   c.Consul.API.TLSConfig.KeyFile,
	}
}

// digestStartFiles fingerprints the content of c's start files when the
// configuration is loaded (the agent reads them a moment later), so that
// Changed sees one rewritten under the same name. Surrounding white space
// does not count: the agent and Consul's client trim tokens, and PEM
// decoding skips it. A file that cannot be read has no digest; loading
// reports that where it matters.
func digestStartFiles(c *Config) map[string][sha256.Size]byte {
	out := map[string][sha256.Size]byte{}
	for key, path := range startFiles(c) {
		if path == "" {
			continue
		}
		if b, err := os.ReadFile(path); err == nil {
			out[key] = sha256.Sum256(bytes.TrimSpace(b))
		}
	}
	return out
}
