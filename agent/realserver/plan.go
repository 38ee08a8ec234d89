package realserver

import (
	"fmt"
	"net/netip"
	"slices"
)

// Actual is what the host has now.
type Actual struct {
	Loopback []netip.Prefix // the addresses on lo
	// Sysctls holds the current value of every key that was read; a key
	// the host does not have (an interface that does not exist) is absent.
	Sysctls map[string]string
}

// OpKind is what an Op does.
type OpKind int

// Op kinds, in the order Plan emits them.
const (
	SetSysctl     OpKind = iota // write Value, remembering Previous
	AddAddress                  // put Address on lo
	DeleteAddress               // remove Address from lo
	RestoreSysctl               // write back the value lvsd found (Value)
	ForgetAddress               // drop Address from the record only: someone removed it
	ForgetSysctl                // drop Key from the record only: someone changed it since, or it is gone
)

var opNames = [...]string{"set-sysctl", "add-address", "delete-address", "restore-sysctl", "forget-address", "forget-sysctl"}

func (k OpKind) String() string {
	if int(k) < len(opNames) {
		return opNames[k]
	}
	return fmt.Sprintf("op(%d)", int(k))
}

// Op is one change to the host or to the record.
type Op struct {
	Kind     OpKind
	Address  netip.Prefix // AddAddress, DeleteAddress, ForgetAddress
	Key      string       // the sysctl ops
	Value    string       // SetSysctl, RestoreSysctl: the value to write
	Previous string       // SetSysctl: the value found, which cleanup restores
	Guard    bool         // SetSysctl: VIPs may be added only once it succeeded
	Reason   string
}

func (o Op) String() string {
	switch o.Kind {
	case SetSysctl:
		return fmt.Sprintf("%s %s=%s (was %s)", o.Kind, o.Key, o.Value, o.Previous)
	case RestoreSysctl:
		return fmt.Sprintf("%s %s=%s", o.Kind, o.Key, o.Value)
	case ForgetSysctl:
		return fmt.Sprintf("%s %s", o.Kind, o.Key)
	}
	return fmt.Sprintf("%s %s dev %s", o.Kind, o.Address, Loopback)
}

// Plan returns the ops that bring a to d, touching only what rec says lvsd
// added when something is no longer wanted. It is pure. Order: sysctls
// first (ARP suppression before any VIP appears), then new VIPs, then the
// VIPs and sysctls no longer wanted. A VIP already on lo, at any prefix
// length, is used as it is and does not become lvsd's; a setting whose
// current value is acceptable is not written. So a second Plan right after
// applying the first is empty.
func Plan(d Desired, a Actual, rec Record) []Op {
	var ops []Op
	wanted := map[string]bool{}
	guardReadable := true
	for _, s := range d.Settings {
		wanted[s.Key] = true
		cur, ok := a.Sysctls[s.Key]
		if !ok {
			// The interface is missing: nothing to write until it appears.
			// Without "all" nothing proves ARP is suppressed.
			guardReadable = guardReadable && !s.Guard
			continue
		}
		if !slices.Contains(s.Accept, cur) {
			ops = append(ops, Op{Kind: SetSysctl, Key: s.Key, Value: s.Value, Previous: cur, Guard: s.Guard, Reason: s.Why})
		}
	}
	if guardReadable {
		for _, p := range d.Addresses {
			if !holds(a.Loopback, p.Addr()) {
				ops = append(ops, Op{Kind: AddAddress, Address: p, Reason: "VIP"})
			}
		}
	}
	for _, p := range rec.Addresses {
		if holds(d.Addresses, p.Addr()) {
			continue
		}
		if slices.Contains(a.Loopback, p) {
			ops = append(ops, Op{Kind: DeleteAddress, Address: p, Reason: "no longer configured"})
		} else {
			ops = append(ops, Op{Kind: ForgetAddress, Address: p, Reason: "removed by someone else"})
		}
	}
	for _, s := range rec.Sysctls {
		if wanted[s.Key] {
			continue
		}
		cur, ok := a.Sysctls[s.Key]
		switch {
		case !ok:
			ops = append(ops, Op{Kind: ForgetSysctl, Key: s.Key, Reason: "the key is gone (interface deleted)"})
		case cur == s.Value:
			ops = append(ops, Op{Kind: RestoreSysctl, Key: s.Key, Value: s.Previous, Reason: "no longer needed"})
		default:
			// Someone set another value after lvsd: theirs stays.
			ops = append(ops, Op{Kind: ForgetSysctl, Key: s.Key, Reason: fmt.Sprintf("changed to %s by someone else", cur)})
		}
	}
	return ops
}

// holds reports whether addrs contain addr at any prefix length.
func holds(addrs []netip.Prefix, addr netip.Addr) bool {
	return slices.ContainsFunc(addrs, func(p netip.Prefix) bool { return p.Addr() == addr })
}

// Keys returns every sysctl key Plan needs to know: those of d and those
// in rec.
func Keys(d Desired, rec Record) []string {
	var keys []string
	for _, s := range d.Settings {
		keys = append(keys, s.Key)
	}
	for _, s := range rec.Sysctls {
		if !slices.Contains(keys, s.Key) {
			keys = append(keys, s.Key)
		}
	}
	return keys
}
