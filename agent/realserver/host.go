package realserver

import (
	"context"
	"errors"
	"fmt"

	"github.com/lvsd/lvsd/arp"
)

// Host is what the real-server agent changes, each part behind the small
// interface of package arp. Tests pass arp.Fake and arp.FakeSysctls.
type Host struct {
	Addrs   arp.Addresses
	Sysctls arp.Sysctls
}

// ReadActual reads the addresses of lo and the sysctls named by keys. Keys
// the host does not have are left out of Actual and returned as missing;
// any other failure is an error.
func (h Host) ReadActual(ctx context.Context, keys []string) (Actual, []string, error) {
	addrs, err := h.Addrs.List(ctx, Loopback)
	if err != nil {
		return Actual{}, nil, err
	}
	a := Actual{Loopback: addrs, Sysctls: make(map[string]string, len(keys))}
	var missing []string
	for _, k := range keys {
		v, err := h.Sysctls.Get(ctx, k)
		switch {
		case errors.Is(err, arp.ErrNotFound):
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
// address or a sysctl that lvsd made but no longer knows is its own, or
// cleanup could never remove it. An entry recorded for a change that then
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
	newAddr, newKey := map[int]bool{}, map[int]bool{}
	for i, op := range ops {
		switch op.Kind {
		case AddAddress:
			newAddr[i] = rec.addAddress(op.Address)
		case SetSysctl:
			newKey[i] = rec.addSysctl(op.Key, op.Previous, op.Value)
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
				if newKey[i] {
					rec.dropSysctl(op.Key)
				}
			}
		case AddAddress:
			if guardFailed {
				err = fmt.Errorf("not adding %s to %s: ARP suppression is not in force", op.Address, Loopback)
			} else {
				err = h.Addrs.Add(ctx, Loopback, op.Address)
			}
			if err != nil && newAddr[i] {
				rec.dropAddress(op.Address)
			}
		case DeleteAddress:
			err = h.Addrs.Delete(ctx, Loopback, op.Address)
			if err == nil || errors.Is(err, arp.ErrNotFound) {
				err = nil
				rec.dropAddress(op.Address)
			}
		case RestoreSysctl:
			err = h.Sysctls.Set(ctx, op.Key, op.Value)
			if err == nil || errors.Is(err, arp.ErrNotFound) {
				err = nil
				rec.dropSysctl(op.Key)
			}
		case ForgetAddress:
			rec.dropAddress(op.Address)
		case ForgetSysctl:
			rec.dropSysctl(op.Key)
		default:
			err = fmt.Errorf("unknown op %v", op.Kind)
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
