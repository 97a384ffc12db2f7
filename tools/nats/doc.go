// Package nats pins the NATS server that the side-by-side benchmarks run
// (docs/design.md §14, issue 8). It is a module of its own so that its dependencies
// cannot change the versions the Consul build in tools/go.mod resolves.
package nats
