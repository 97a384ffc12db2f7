// Package consultest runs a real Consul server (bin/consul) for the tests of
// any package: on free loopback ports, in dev mode or with a persistent data
// directory, optionally with ACLs enforced, and always stopped by PID when the
// test ends so that no process outlives it.
package consultest
