// Package tools pins the external programs that logagent's tests, dev mode and
// benchmarks run (see docs/design.md §14). Nothing here is imported by the product; the
// Makefile builds each program into bin/ from the versions pinned in go.mod.
package tools
