// Package freeport hands out loopback ports for the servers that tests and
// benchmarks start as child processes (Consul, agents, nats-server): ports
// that were free when probed, never handed out twice in one process, and
// drawn below the kernel's ephemeral range so that an outgoing connection
// elsewhere on the machine does not take one between the probe and the
// child's bind.
package freeport
