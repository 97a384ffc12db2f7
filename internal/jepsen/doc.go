// Package jepsen runs fault-injection scenarios against a real logagent
// cluster (docs/design.md §13, issue 7) and checks what clients saw: a workload of
// producers writing unique values with acks=all and consumers reading them
// back, each through its own agent; a nemesis injecting a seeded schedule
// of faults (kill -9, SIGSTOP, link cuts, restarts) through testcluster;
// then a heal, a final read of every partition from every replica, and
// internal/checker's verdict, written as report.json and summary.txt.
package jepsen
