package realserver

import (
	"context"
	"errors"

	"github.com/lvsd/lvsd/agent/api"
)

// reloadAndApply is a reload request's work, on Run's goroutine.
func (a *Agent) reloadAndApply(ctx context.Context) api.ReloadResult {
	if err := a.reload("request"); err != nil {
		return api.ReloadResult{Rejected: true, Error: "configuration rejected, the last good one stays in force: " + err.Error()}
	}
	r := api.ReloadResult{Changes: len(a.reconcile(ctx))}
	if a.passErr != nil {
		r.Error = "some changes failed and are retried: " + a.passErr.Error()
	}
	return r
}

// requestReload asks Run to reload and apply, and waits for the result.
func (a *Agent) requestReload(ctx context.Context) (api.ReloadResult, error) {
	reply := make(chan api.ReloadResult, 1)
	select {
	case a.reloads <- reply:
	case <-a.stopping:
		return api.ReloadResult{}, errors.New("the agent is stopping")
	case <-ctx.Done():
		return api.ReloadResult{}, ctx.Err()
	}
	select {
	case r := <-reply:
		return r, nil
	case <-ctx.Done():
		return api.ReloadResult{}, ctx.Err()
	}
}
