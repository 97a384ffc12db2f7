// Package agent is the logagent daemon: it opens and locks the data
// directory, connects to Consul through election, serves the client API (the
// sidecar applications use on localhost) and the peer API (between agents)
// with fasthttp, and stops gracefully. It does the I/O; the protocol
// decisions live in replicate, election and segstore.
package agent
