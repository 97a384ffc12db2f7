// Package wire defines, once, the names that cross the HTTP APIs: error
// codes, header names and content types (docs/design.md §8). The agent, the
// Go client and the test harnesses import them, so a name cannot drift
// between the side that writes it and the side that reads it.
package wire
