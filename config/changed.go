package config

import (
	"reflect"
	"strings"
)

// Changed returns the settings whose values differ between a and b, named
// as a configuration file spells them ("storage.retention", "client.tls"
// for a TLS block turned on or off), in the order of the file schema. It
// compares values, not text: "168h" and "10080m" are the same retention,
// and a default written out is no change. It names keys only, never their
// values (consul.token is a secret).
//
// A running agent applies few settings without a restart (docs/operations.md,
// "Start, stop, reload"); a reload uses this to say which of the others it
// was given and ignored, instead of ignoring them silently.
func Changed(a, b *Config) []string {
	var out []string
	changedIn(reflect.TypeFor[fileRoot](), reflect.ValueOf(*a), reflect.ValueOf(*b), "", &out)
	return out
}

// changedIn compares a and b, values of a Config struct, over the keys of
// the schema block type block, appending the names under prefix that
// differ.
func changedIn(block reflect.Type, a, b reflect.Value, prefix string, out *[]string) {
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
			changedIn(key.Type.Elem(), va, vb, name+".", out)
			continue
		}
		if !reflect.DeepEqual(va.Interface(), vb.Interface()) {
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
