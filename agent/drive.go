package agent

import (
	"context"

	"github.com/lvsd/lvsd/ipvs"
)

// Start, Step, Resync and Reload run the pieces of Run one at a time, for
// a caller that drives the agent by hand instead of Run: the tests of the
// views above it (agent/views), which need passes at chosen moments of a
// clock of their own. The goroutine that calls them is the agent's owner,
// as Run's is; Run must not run as well.

// Start loads the configuration and the records, as Run does first.
func (a *Agent) Start() error { return a.start() }

// Step runs what Run's loop runs at a Check tick (the drains in progress,
// a step of the audit when due), with the IPVS services of recheck read
// back too.
func (a *Agent) Step(ctx context.Context, recheck ...ipvs.ServiceKey) {
	a.pending.add(recheck...)
	a.tick()
	a.reconcile(ctx)
}

// Resync runs a pass that reads back and plans everything, as the first
// pass does.
func (a *Agent) Resync(ctx context.Context) {
	a.pending.merge(scope{all: true, globals: true, holder: true})
	a.Step(ctx)
}

// Reload reads the whole configuration again, as at a signal; what
// changed goes into the next Step.
func (a *Agent) Reload() { a.reload("request", nil) }
