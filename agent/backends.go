package agent

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/lvsd/lvsd/agent/planner"
)

// ErrStopping is the answer of a change the loop can no longer take.
var ErrStopping = errors.New("the agent is stopping")

// backendRequest is a change handed to the agent's goroutine.
type backendRequest struct {
	change planner.BackendChange
	reply  chan backendReply
}

type backendReply struct {
	override planner.BackendOverride
	after    *Snapshot
	err      error
}

// ChangeBackend applies an operator's change to one backend: on the
// agent's goroutine it records the override, decides the service's
// eligible backends again and runs a pass for that service only. It
// returns the override as recorded and the snapshot published once the
// pass is done (its Err says why the pass failed, if it did). Safe to call
// from any goroutine while Run runs.
func (a *Agent) ChangeBackend(ctx context.Context, c planner.BackendChange) (planner.BackendOverride, *Snapshot, error) {
	if a.snap.Load() == nil {
		return planner.BackendOverride{}, nil, ErrNotReady
	}
	r := backendRequest{change: c, reply: make(chan backendReply, 1)}
	select {
	case a.reqs <- r:
	case <-ctx.Done():
		return planner.BackendOverride{}, nil, ctx.Err()
	case <-a.stopped:
		return planner.BackendOverride{}, nil, ErrStopping
	}
	got := <-r.reply // the loop answers every request it takes
	return got.override, got.after, got.err
}

// changeBackend is ChangeBackend on the agent's goroutine; ctx is the
// loop's (a client that hangs up does not cut a pass short).
func (a *Agent) changeBackend(ctx context.Context, c planner.BackendChange) (planner.BackendOverride, *Snapshot, error) {
	next, ov, err := a.overrides.With(a.cfg.Services, c, a.opts.Now())
	if err != nil {
		return planner.BackendOverride{}, nil, err
	}
	if err := SaveOverrides(a.cfg.Agent.StateDir, next); err != nil {
		return planner.BackendOverride{}, nil, fmt.Errorf("recording the override; nothing changed: %w", err)
	}
	a.overrides = next
	a.log.Info("backend override", "event", "override", "action", c.Action, "service", ov.Service,
		"backend", ov.Backend, "drained", ov.Drained, "weight", weightOrFile(ov.Weight))
	names := map[string]bool{c.Service: true}
	a.applyHealth(names)
	a.pending.add(a.cfg.serviceKeys(names)...)
	a.reconcile(ctx)
	a.republish()
	return ov, a.snap.Load(), nil
}

func weightOrFile(w *int) string {
	if w == nil {
		return "file"
	}
	return strconv.Itoa(*w)
}

// pruneOverrides drops the overrides of backends the configuration in
// force no longer has, and logs each.
func (a *Agent) pruneOverrides() {
	kept, dropped := a.overrides.Pruned(a.cfg.Services)
	if len(dropped) == 0 {
		return
	}
	for _, ov := range dropped {
		a.log.Warn("backend override dropped: the configuration no longer has the backend", "event", "override",
			"service", ov.Service, "backend", ov.Backend, "drained", ov.Drained, "weight", weightOrFile(ov.Weight))
	}
	if err := SaveOverrides(a.cfg.Agent.StateDir, kept); err != nil {
		// Dropped all the same: the next start drops them again.
		a.log.Error("saving backend overrides", "err", err)
	}
	a.overrides = kept
}
