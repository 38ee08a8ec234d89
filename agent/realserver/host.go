package realserver

import (
	"context"
	"errors"
	"fmt"

	"github.com/lvsd/lvsd/arp"
	"github.com/lvsd/lvsd/arp/sysctl"
	"github.com/lvsd/lvsd/nat"
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
}

// ReadActual reads what Plan compares for d and rec: the addresses of lo,
// the sysctls (Keys), and the tunnel devices, GUE ports and nftables
// tables when d wants or rec holds any. Keys the host does not have are
// left out of Actual and returned as missing; any other failure is an
// error.
func (h Host) ReadActual(ctx context.Context, d Desired, rec Record) (Actual, []string, error) {
	addrs, err := h.Addrs.List(ctx, Loopback)
	if err != nil {
		return Actual{}, nil, err
	}
	keys := Keys(d, rec)
	a := Actual{Loopback: addrs, Sysctls: make(map[string]string, len(keys))}
	if err := h.readDecapsulation(ctx, d, rec, &a); err != nil {
		return Actual{}, nil, err
	}
	var missing []string
	for _, k := range keys {
		v, err := h.Sysctls.Get(ctx, k)
		switch {
		case errors.Is(err, sysctl.ErrMissing):
			missing = append(missing, k)
		case err != nil:
			return Actual{}, nil, err
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
func (h Host) Apply(ctx context.Context, ops []Op, rec *Record, save func(Record) error) error {
	if len(ops) == 0 {
		return nil
	}
	before := rec.clone()
	recorded := map[int]bool{} // the op's entry is new in the record
	for i, op := range ops {
		switch op.Kind {
		case AddAddress:
			recorded[i] = rec.addAddress(op.Address)
		case SetSysctl:
			recorded[i] = rec.addSysctl(op.Key, op.Previous, op.Value)
		default:
			recorded[i] = intendTunnel(rec, op)
		}
	}
	if !rec.equal(before) {
		if err := save(*rec); err != nil {
			*rec = before
			return fmt.Errorf("recording what lvsd is about to change (nothing changed): %w", err)
		}
	}
	saved := rec.clone()
	var errs []error
	guardFailed := false
	for i, op := range ops {
		var err error
		switch op.Kind {
		case SetSysctl:
			if err = h.Sysctls.Set(ctx, op.Key, op.Value); err != nil {
				guardFailed = guardFailed || op.Guard
				if recorded[i] {
					rec.dropSysctl(op.Key)
				}
			}
		case AddAddress:
			if guardFailed {
				err = fmt.Errorf("not adding %s to %s: ARP suppression is not in force", op.Address, Loopback)
			} else {
				err = h.Addrs.Add(ctx, Loopback, op.Address)
			}
			if err != nil && recorded[i] {
				rec.dropAddress(op.Address)
			}
		case DeleteAddress:
			if err = h.Addrs.Delete(ctx, Loopback, op.Address); done(err) {
				err = nil
				rec.dropAddress(op.Address)
			}
		case RestoreSysctl:
			if err = h.Sysctls.Set(ctx, op.Key, op.Value); err == nil || errors.Is(err, sysctl.ErrMissing) {
				err = nil
				rec.dropSysctl(op.Key)
			}
		case ForgetAddress:
			rec.dropAddress(op.Address)
		case ForgetSysctl:
			rec.dropSysctl(op.Key)
		default:
			err = h.applyTunnel(ctx, op, rec, recorded[i])
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", op, err))
		}
	}
	if !rec.equal(saved) {
		if err := save(*rec); err != nil {
			errs = append(errs, fmt.Errorf("saving the record: %w", err))
		}
	}
	return errors.Join(errs...)
}
