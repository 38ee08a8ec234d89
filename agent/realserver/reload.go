package realserver

import (
	"context"

	"github.com/lvsd/lvsd/agent/api"
)

// reloadAndApply is a reload request's work, on Run's goroutine.
func (a *Agent) reloadAndApply(ctx context.Context) api.ReloadResult {
	if err := a.reload("request"); err != nil {
		r := api.ReloadResult{Rejected: true}
		r.Failed(err)
		return r
	}
	r := api.ReloadResult{Changes: len(a.reconcile(ctx))}
	r.Failed(a.passErr)
	return r
}

// requestReload asks Run to reload and apply, and waits for the result.
func (a *Agent) requestReload(ctx context.Context) (api.ReloadResult, error) {
	reply := make(chan api.ReloadResult, 1)
	return handOff(ctx, a, a.reloads, reply, reply)
}
