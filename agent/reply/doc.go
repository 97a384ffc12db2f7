// Package reply writes the answers that the agent's two HTTP APIs share,
// so that the client API (agent/) and the peer API's server
// (agent/peerapi) answer in the same bytes: the JSON error object of
// docs/design.md §8 (APIError), a JSON body, a log region sent with
// sendfile(2), and the error answer of a failed log read. It also holds
// what agent/ and the packages it moves its capabilities to both use of
// those APIs: the one-object rule of a request's JSON body
// (DecodeOneObject) and a peer's error answer relayed unchanged
// (RelayedError). It sits below them so that neither imports the other
// for them (docs/design.md §2.1).
package reply
