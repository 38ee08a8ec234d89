package agent

import (
	"context"
	"errors"

	"github.com/lvsd/lvsd/agent/api"
	"github.com/lvsd/lvsd/agent/planner"
)

// reloadRequest is a reload asked through the API, answered on reply once
// applied.
type reloadRequest struct{ reply chan api.ReloadResult }

// errStopped answers a request that reached an agent no longer running.
var errStopped = errors.New("the agent is stopping")

// RequestReload reads the configuration again and applies it, as SIGHUP
// does, and returns what that did once the kernel has it: `lvsd reload`,
// and so `systemctl reload`, fail when the configuration is rejected or a
// change cannot be applied. Safe to call from any goroutine while Run
// runs.
func (a *Agent) RequestReload(ctx context.Context) (api.ReloadResult, error) {
	req := reloadRequest{reply: make(chan api.ReloadResult, 1)}
	select {
	case a.reloads <- req:
	case <-a.stopped:
		return api.ReloadResult{}, errStopped
	case <-ctx.Done():
		return api.ReloadResult{}, ctx.Err()
	}
	select {
	case r := <-req.reply:
		return r, nil
	case <-ctx.Done(): // the reload goes on; its outcome is in the log and the status
		return api.ReloadResult{}, ctx.Err()
	}
}

// reloadAndApply is a reload request's work, on Run's goroutine.
func (a *Agent) reloadAndApply(ctx context.Context) api.ReloadResult {
	changed, restart, err := a.reload("request", nil)
	if err != nil {
		return api.ReloadResult{Rejected: true, Error: "configuration rejected, the last good one stays in force: " + err.Error()}
	}
	ops := a.reconcile(ctx)
	a.settleMemory()
	r := api.ReloadResult{Changed: changed, Restart: restart, Changes: countKernelChanges(ops)}
	if s := a.snap.Load(); s != nil && s.Err != "" {
		r.Error = "some changes failed and are retried: " + s.Err
	}
	return r
}

// countKernelChanges counts the ops that change the kernel (not the waits).
func countKernelChanges(ops []planner.Op) int {
	n := 0
	for _, op := range ops {
		if op.Kind != planner.AwaitExpiry {
			n++
		}
	}
	return n
}
