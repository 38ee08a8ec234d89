package realserver

import (
	"fmt"
	"net/netip"
	"slices"

	"github.com/lvsd/lvsd/arp"
	"github.com/lvsd/lvsd/nat"
)

// Actual is what the host has now.
type Actual struct {
	Loopback []netip.Prefix // the addresses on lo
	// Sysctls holds the current value of every key that was read; a key
	// the host does not have (an interface that does not exist) is absent.
	Sysctls map[string]string
	// Links holds the tunnel devices desired or recorded that exist.
	Links map[string]arp.Link
	// FouPorts are the GUE receive ports (read only when some are desired
	// or recorded).
	FouPorts []arp.FouPort
	// NATDigest is the digest of lvsd's nftables tables, "" when there are
	// none (read only when the MSS clamp is desired or recorded).
	NATDigest string
}

// OpKind is what an Op does.
type OpKind int

// Op kinds, in the order Plan emits them.
const (
	SetSysctl     OpKind = iota // write Value, remembering Previous
	CreateLink                  // make tunnel device Link of Kind exist (loads its module)
	AddAddress                  // put Address on lo
	AddFouPort                  // open GUE receive port Fou
	ReplaceNAT                  // put NAT (the MSS clamp) in lvsd's nftables tables
	SetLinkUp                   // bring tunnel device Link up
	SetLinkDown                 // take tunnel device Link down (lvsd brought it up)
	DeleteLink                  // delete tunnel device Link (lvsd created it)
	DeleteAddress               // remove Address from lo
	DeleteFouPort               // close GUE receive port Fou
	RemoveNAT                   // delete lvsd's nftables tables
	RestoreSysctl               // write back the value lvsd found (Value)
	ForgetAddress               // drop Address from the record only: someone removed it
	ForgetSysctl                // drop Key from the record only: someone changed it since, or it is gone
	ForgetLink                  // drop Link from the record only: it is gone, or someone took it down
	ForgetFouPort               // drop Fou from the record only: someone closed it
	ForgetNAT                   // drop the nftables tables from the record only: someone removed them
)

var opNames = [...]string{"set-sysctl", "create-link", "add-address", "add-fou", "replace-nft", "set-link-up",
	"set-link-down", "delete-link", "delete-address", "delete-fou", "remove-nft", "restore-sysctl",
	"forget-address", "forget-sysctl", "forget-link", "forget-fou", "forget-nft"}

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
	Link     TunnelLink   // the link ops (Kind only for CreateLink)
	Fou      arp.FouPort  // AddFouPort, DeleteFouPort, ForgetFouPort
	NAT      nat.Ruleset  // ReplaceNAT
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
	case CreateLink:
		return fmt.Sprintf("%s %s type %s", o.Kind, o.Link.Name, o.Link.Kind)
	case SetLinkUp, SetLinkDown, DeleteLink, ForgetLink:
		return fmt.Sprintf("%s %s", o.Kind, o.Link.Name)
	case AddFouPort, DeleteFouPort, ForgetFouPort:
		return fmt.Sprintf("%s %s", o.Kind, o.Fou)
	case ReplaceNAT, RemoveNAT, ForgetNAT:
		return fmt.Sprintf("%s ip/ip6 %s", o.Kind, nat.TableName)
	}
	return fmt.Sprintf("%s %s dev %s", o.Kind, o.Address, Loopback)
}

// Plan returns the ops that bring a to d, touching only what rec says lvsd
// added when something is no longer wanted. It is pure. Order: sysctls
// first (ARP suppression before any VIP appears), then missing tunnel
// devices, new VIPs, GUE ports, the MSS clamp, and tunnel devices up last
// (everything they deliver to is in place); then what is no longer
// wanted, tunnel devices first (nothing new arrives), VIPs, ports, the
// clamp, sysctls. A VIP already on lo, at any prefix length, is used as it
// is and does not become lvsd's; nor does a device already up, a port
// already open, or a setting whose current value is acceptable. So a second
// Plan right after applying the first is empty, except after CreateLink:
// the device's sysctls and its bringing up wait for the next Plan, which
// can read them.
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
	ops = append(ops, createLinks(d, a)...)
	if guardReadable {
		for _, p := range d.Addresses {
			if !holds(a.Loopback, p.Addr()) {
				ops = append(ops, Op{Kind: AddAddress, Address: p, Reason: "VIP"})
			}
		}
	}
	ops = append(ops, planDecapsulation(d, a)...)
	ops = append(ops, removeLinks(d, a, rec)...)
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
	ops = append(ops, removeDecapsulation(d, a, rec)...)
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
