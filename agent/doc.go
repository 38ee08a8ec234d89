// Package agent is lvsd's brain. It turns validated configuration into the
// desired kernel state with pure code (Build), compares that with what the
// kernel holds (Plan), and applies the smallest set of changes through the
// small interfaces of the kernel packages (ipvs, arp). One goroutine, the
// reconciler in Run, owns all mutable state; the views above it
// (agent/views: status, local API, metrics) read the Snapshot it publishes
// after each pass (published.go).
package agent
