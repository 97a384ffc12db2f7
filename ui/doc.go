// Package ui is the status page an agent serves on its client API at /ui/:
// three static files embedded in the binary (index.html, app.js, style.css;
// no framework, nothing fetched from the network) and the JSON they poll
// every second, /ui/api/state.
//
// The package defines what the page shows (State) and what it needs to get
// it (Source); the agent implements Source from its Consul view and its own
// replicas. The handler adds what follows from the data (under-replicated,
// under min ISR, leader not preferred, lag, the totals), so those rules live
// in one place and are tested here. ui imports nothing of the agent.
package ui
