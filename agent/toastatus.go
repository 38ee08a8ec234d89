package agent

import (
	"context"
	"errors"
	"fmt"

	"github.com/lvsd/lvsd/agent/planner"
)

// TOAStatus is the director's TOA program as `lvsd status` shows it: where
// it is attached and what it acts on as the last pass found them, and its
// counters read now.
type TOAStatus struct {
	Interfaces []string `json:"interfaces"`
	Services   []string `json:"services"` // VIP:ports
	// Added counts SYNs that carry the client's address, NoRoom SYNs whose
	// options left no room, Stripped packets whose own option (a client's
	// forgery) was overwritten, Unsupported SYNs passed without (IPv4
	// options, data in the SYN, a helper failed).
	Added       uint64 `json:"options_added"`
	NoRoom      uint64 `json:"no_room"`
	Stripped    uint64 `json:"forged_stripped"`
	Unsupported uint64 `json:"unsupported"`
}

// TOA returns the TOA program's status; nil when this director has none
// (no service with client_address toa, nothing pinned).
func (a *Agent) TOA(ctx context.Context) (*TOAStatus, error) {
	s := a.Published()
	if s == nil {
		return nil, ErrNotReady
	}
	t := s.Actual.TOA
	if k := a.opts.Kernel.TOA; k == nil || !t.Pinned && !s.Desired.TOA.Wanted() {
		return nil, nil
	}
	st := &TOAStatus{Interfaces: t.Interfaces, Services: make([]string, len(t.Services))}
	for i, v := range t.Services {
		st.Services[i] = v.String()
	}
	c, err := a.opts.Kernel.TOA.Stats(ctx)
	if err != nil {
		return nil, fmt.Errorf("toa counters: %w", err)
	}
	st.Added, st.NoRoom, st.Stripped, st.Unsupported = c.Added, c.NoRoom, c.Stripped, c.Unsupported
	return st, nil
}

// CleanupTOA removes the TOA program a director left pinned (`lvsd
// cleanup` on a stopped director) and returns the ops it ran: it outlives
// lvsd, unlike what lvsd's next run takes back on its own. Nothing
// pinned: no op.
func CleanupTOA(ctx context.Context, k Kernel) ([]planner.Op, error) {
	actual, err := k.readTOA(ctx)
	if err != nil {
		return nil, err
	}
	ops, _ := planner.Plan(planner.PlanInput{Actual: planner.Actual{TOA: actual}, Desired: planner.Desired{Sysctls: map[string]string{}}})
	return ops, errors.Join(k.Apply(ctx, ops)...)
}
