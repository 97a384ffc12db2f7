// Package config loads logagent's HCL configuration (docs/design.md §10).
//
// Configuration comes from sources merged in order: the built-in defaults
// (defaults.hcl, embedded), then each -config file, or each *.hcl file of a
// -config directory in name order. A later source overrides only the keys it
// sets. The merged result is validated into Config, a plain runtime value
// with parsed sizes and durations, and paths made absolute: a relative one
// is read from the directory of the file that sets it. Unknown keys, bad
// values and inconsistent settings are reported together as diagnostics
// that carry the file, line and column of the offending value.
package config
