package realserver

import (
	"context"
	"errors"
	"fmt"

	"github.com/lvsd/lvsd/agent/apply"
	"github.com/lvsd/lvsd/agent/planner"
	"github.com/lvsd/lvsd/arp"
	"github.com/lvsd/lvsd/arp/sysctl"
	"github.com/lvsd/lvsd/nat"
	"github.com/lvsd/lvsd/nat/toa"
)

// Host is what the real-server agent changes, each part behind the small
// interface of package arp (nat for the MSS clamp of tunnel VIPs). Tests
// pass the fakes. Tunnels and NAT are used only with tunnel VIPs (or their
// record), so a DR-only host may leave them nil.
type Host struct {
	Addrs   arp.Addresses
	Sysctls sysctl.Interface
	Tunnels arp.Tunnels
	NAT     nat.Interface
	// TOA is the TOA programs of realserver.client_address; nil: this host
	// cannot run them (and with nothing pinned, nothing to clean up).
	TOA toa.RealServer
}

// ReadActual reads what planner.PlanRealServer compares for d and owned:
// the addresses of lo, the sysctls (planner.RealServerKeys), and the tunnel
// devices, GUE ports and nftables tables when d wants or owned holds any.
// Keys the host does not have are left out of the actual state and
// returned as missing; any other failure is an error.
func (h Host) ReadActual(ctx context.Context, d planner.RealServerDesired, owned planner.Ownership) (planner.RealServerActual, []string, error) {
	addrs, err := h.Addrs.List(ctx, planner.Loopback)
	if err != nil {
		return planner.RealServerActual{}, nil, err
	}
	keys := planner.RealServerKeys(d, owned)
	a := planner.RealServerActual{Loopback: addrs, Sysctls: make(map[string]string, len(keys))}
	if err := h.readDecapsulation(ctx, d, owned, &a); err != nil {
		return planner.RealServerActual{}, nil, err
	}
	var missing []string
	for _, k := range keys {
		v, err := h.Sysctls.Get(ctx, k)
		switch {
		case errors.Is(err, sysctl.ErrMissing):
			missing = append(missing, k)
		case err != nil:
			return planner.RealServerActual{}, nil, err
		default:
			a.Sysctls[k] = v
		}
	}
	return a, missing, nil
}

// Apply runs ops in order and keeps rec in step with what now exists.
//
// What it is about to add is recorded first (save is called before any
// change): a crash between the change and the record must not leave an
// address, a sysctl, a tunnel device brought up, a GUE port or nftables
// tables that lvsd made but no longer knows are its own, or cleanup could
// never remove them. An entry recorded for a change that then
// failed is dropped again. If save fails, nothing is changed.
//
// A failed op does not stop the others, except that no VIP is added once a
// guard setting failed (ARP for it would not be suppressed). Every failure
// is returned, joined.
func (h Host) Apply(ctx context.Context, ops []planner.Op, rec *Record, save func(Record) error) error {
	if len(ops) == 0 {
		return nil
	}
	a := apply.Applier{Claims: claims, UnclaimFailed: true, Run: h.run,
		Save: func(o planner.Ownership) error {
			r := *rec
			r.Ownership = o
			return save(r)
		}}
	r, err := a.Apply(ctx, rec.Ownership, ops, nil)
	if err != nil {
		return fmt.Errorf("recording what lvsd is about to change (nothing changed): %w", err)
	}
	rec.Ownership = r.After
	var failed []error
	for i, err := range r.Errs {
		if err != nil {
			failed = append(failed, fmt.Errorf("%s: %w", ops[i].Describe(), err))
		}
	}
	if r.SaveErr != nil {
		failed = append(failed, fmt.Errorf("saving the record: %w", r.SaveErr))
	}
	return errors.Join(failed...)
}

// run executes ops on the host (an apply.Executor).
func (h Host) run(ctx context.Context, ops []planner.Op) (errs []error, gone []bool) {
	errs, gone = make([]error, len(ops)), make([]bool, len(ops))
	guardFailed := false
	for i, op := range ops {
		var err error
		switch op.Kind {
		case planner.SetSysctl:
			if err = h.Sysctls.Set(ctx, op.Key, op.Value); err != nil {
				guardFailed = guardFailed || op.Guard
			}
		case planner.AddAddress:
			if guardFailed {
				err = fmt.Errorf("not adding %s to %s: ARP suppression is not in force", op.Address, op.Interface)
			} else {
				err = h.Addrs.Add(ctx, op.Interface, op.Address)
			}
		case planner.DeleteAddress:
			if err = h.Addrs.Delete(ctx, op.Interface, op.Address); done(err) {
				err, gone[i] = nil, true
			}
		case planner.RestoreSysctl:
			if err = h.Sysctls.Set(ctx, op.Key, op.Value); err == nil || errors.Is(err, sysctl.ErrMissing) {
				err, gone[i] = nil, true
			}
		case planner.ForgetAddress, planner.ForgetSysctl, planner.ForgetLink, planner.ForgetFouPort, planner.ForgetNAT:
			gone[i] = true
		default:
			gone[i], err = h.runTunnel(ctx, op)
		}
		errs[i] = err
	}
	return errs, gone
}
