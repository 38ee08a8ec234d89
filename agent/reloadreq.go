package agent

import (
	"context"
	"errors"
)

// ReloadOutcome is what a requested reload did.
type ReloadOutcome struct {
	// Rejected: the configuration did not load (Err says why); the last
	// good one stays in force.
	Rejected bool
	// Err is why it was rejected, or the changes that failed (retried).
	Err error
	// Changed counts the services whose definition changed; Restart
	// names the changed keys that take effect only after a restart.
	Changed int
	Restart []string
	// Changes counts the kernel changes it made.
	Changes int
	// Held is the change of services loaded but kept out of force until
	// every live director has it (cluster.coordinated_changes), this
	// reload's or an earlier one's; nil: none waits. The reload is
	// accepted: the change goes in force by itself.
	Held *HeldChange
}

// reloadRequest is a reload asked through the API, answered on reply once
// applied.
type reloadRequest struct{ reply chan ReloadOutcome }

// RequestReload reads the configuration again and applies it, as SIGHUP
// does, and returns what that did once the kernel has it: `lvsd reload`,
// and so `systemctl reload`, fail when the configuration is rejected or a
// change cannot be applied. Safe to call from any goroutine while Run
// runs.
func (a *Agent) RequestReload(ctx context.Context) (ReloadOutcome, error) {
	req := reloadRequest{reply: make(chan ReloadOutcome, 1)}
	select {
	case a.reloads <- req:
	case <-a.stopped:
		return ReloadOutcome{}, ErrStopping
	case <-ctx.Done():
		return ReloadOutcome{}, ctx.Err()
	}
	select {
	case r := <-req.reply:
		return r, nil
	case <-ctx.Done(): // the reload goes on; its outcome is in the log and the status
		return ReloadOutcome{}, ctx.Err()
	}
}

// reloadAndApply is a reload request's work, on Run's goroutine.
func (a *Agent) reloadAndApply(ctx context.Context) ReloadOutcome {
	changed, restart, err := a.reload("request", nil)
	if err != nil {
		return ReloadOutcome{Rejected: true, Err: err}
	}
	_, counts := a.reconcile(ctx)
	a.settleMemory()
	_, changes := counts.Total()
	r := ReloadOutcome{Changed: changed, Restart: restart, Changes: changes, Held: a.coordination.Held}
	if s := a.snap.Load(); s != nil && s.Err != "" {
		r.Err = errors.New(s.Err)
	}
	return r
}
