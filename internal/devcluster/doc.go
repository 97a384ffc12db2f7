// Package devcluster runs `logagent dev`: a Consul dev server and N agents
// (three by default) as child processes on loopback, for trying logagent on one machine
// (docs/design.md §11). It builds nothing: it runs the given logagent executable and
// a Consul binary built by `make consul`. Every child is started in its own
// process group with a parent-death signal, and stopped by PID.
package devcluster
