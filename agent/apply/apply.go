// Package apply runs a plan with lvsd's ownership record written ahead, for
// every writer of a record: the director's reconciler (IPVS services) and
// VIP holder (addresses), and the real server (its VIPs on lo, sysctls and
// tunnel decapsulation). What a plan is about to make is claimed and saved
// before the host changes (planner.Ownership.Intend); what is gone
// afterwards leaves the record, saved again (After). So a crash at any
// point leaves nothing lvsd made without a claim on it, and if the claim
// cannot be saved nothing changes. The ops themselves run in an Executor,
// which reaches the host through the kernel packages' interfaces.
package apply

import (
	"context"

	"github.com/lvsd/lvsd/agent/planner"
	ipvs "github.com/lvsd/lvsd/ipvs/spec"
)

// Executor runs ops on the host in order and returns, op by op, its error
// (nil: done) and whether its object is not lvsd's now: deleted or found
// already gone, forgotten, or found made by someone else (a tunnel
// module's fallback device).
type Executor func(ctx context.Context, ops []planner.Op) (errs []error, gone []bool)

// Applier runs plans for one record file; its goroutine is the file's one
// writer.
type Applier struct {
	// Claims are the kinds of object this record takes on.
	Claims planner.Claims
	// UnclaimFailed drops again the entry Intend added for an op that then
	// failed: the real server's record holds only what it made. Without
	// it a failed add stays claimed, since the object may exist and a
	// claim on a missing one is harmless (the director's records).
	UnclaimFailed bool
	// Save writes the record; it is called only when the record changed.
	Save func(planner.Ownership) error
	// Run executes the ops.
	Run Executor
}

// Result is what Apply did.
type Result struct {
	// After is the record once the ops ran.
	After planner.Ownership
	// Errs holds each op's error (nil: done).
	Errs []error
	// SaveErr says saving After failed: the file still holds the claims,
	// and the next change saves it.
	SaveErr error
}

// Apply runs ops on the host with owned, the record as saved, written
// ahead; the services of adopt (configured and found in the kernel) are
// claimed with the plan's. If the claims cannot be saved, no op runs and
// that is the error.
func (a Applier) Apply(ctx context.Context, owned planner.Ownership, ops []planner.Op, adopt []ipvs.ServiceKey) (Result, error) {
	var fresh []bool
	if a.UnclaimFailed {
		fresh = owned.NewClaims(ops, a.Claims)
	}
	intended := owned.Intend(ops, a.Claims).Adopt(adopt)
	if !intended.Equal(owned) {
		if err := a.Save(intended); err != nil {
			return Result{}, err
		}
	}
	errs, gone := a.Run(ctx, ops)
	for i := range fresh {
		gone[i] = gone[i] || fresh[i] && errs[i] != nil
	}
	r := Result{After: intended.After(ops, gone), Errs: errs}
	if !r.After.Equal(intended) {
		r.SaveErr = a.Save(r.After)
	}
	return r, nil
}
