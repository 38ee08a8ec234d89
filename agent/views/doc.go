// Package views holds the views of a running director agent: the status
// (`lvsd status`), the flow explanation (`lvsd explain`), the connection
// listing, the runtime control of backends (`lvsd backend`), the local API
// that serves them, and the director's Prometheus collector. It sits above
// package agent and reads only what the agent publishes (agent.Snapshot,
// the read-only doors of published.go): the reconciler's goroutine stays
// the only owner of its state. The metrics are here, not in agent/metrics
// (the /metrics server and the series both roles export), because each
// scrape is a read of the status.
package views
