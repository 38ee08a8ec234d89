package agent

import (
	"fmt"
	"net/netip"
	"slices"

	"github.com/lvsd/lvsd/ipvs"
	"github.com/lvsd/lvsd/nat"
)

// OpKind is the kind of one kernel change.
type OpKind int

// Kinds of change.
const (
	AddAddress OpKind = iota
	AddService
	UpdateService
	AddDestination
	UpdateDestination
	DeleteDestination
	DeleteService
	DeleteAddress
	ReplaceNAT
	RemoveNAT
	// AwaitExpiry waits until the kernel has dropped the connection entries
	// of destinations just deleted to reset their connections.
	AwaitExpiry
)

var opNames = [...]string{"add-address", "add-service", "update-service", "add-destination",
	"update-destination", "delete-destination", "delete-service", "delete-address", "replace-nft-tables",
	"remove-nft-tables", "await-expiry"}

func (k OpKind) String() string { return opNames[k] }

// Op is one change to the kernel. Reason says why, for logs and `lvsd plan`.
type Op struct {
	Kind        OpKind
	Service     ipvs.Service
	Destination ipvs.Destination
	Interface   string
	Address     netip.Prefix
	NAT         nat.Ruleset
	Expiring    ipvs.Expiring // AwaitExpiry: whose connections
	Reason      string
}

func (o Op) String() string {
	var s string
	switch o.Kind {
	case AddAddress, DeleteAddress:
		s = fmt.Sprintf("%s %s dev %s", o.Kind, o.Address, o.Interface)
	case AddService, UpdateService:
		s = fmt.Sprintf("%s %s", o.Kind, o.Service)
	case DeleteService:
		s = fmt.Sprintf("%s %s", o.Kind, o.Service.ServiceKey)
	case DeleteDestination:
		s = fmt.Sprintf("%s %s -> %s", o.Kind, o.Service.ServiceKey, o.Destination.DestinationKey)
	case ReplaceNAT:
		s = fmt.Sprintf("%s ip/ip6 %s (ruleset %s)", o.Kind, nat.TableName, o.NAT.Digest())
	case RemoveNAT:
		s = fmt.Sprintf("%s ip/ip6 %s", o.Kind, nat.TableName)
	case AwaitExpiry:
		s = fmt.Sprintf("%s %s -> %v", o.Kind, o.Service.ServiceKey, o.Expiring.Dests)
	default:
		s = fmt.Sprintf("%s %s -> %s weight %d %s", o.Kind, o.Service.ServiceKey, o.Destination.DestinationKey,
			o.Destination.Weight, o.Destination.Forwarding)
	}
	if o.Reason != "" {
		s += " (" + o.Reason + ")"
	}
	return s
}

// Actual is the kernel state as read back.
type Actual struct {
	Services  map[ipvs.ServiceKey]ActualService
	Addresses []netip.Prefix // on the desired interface
	NATDigest string         // digest of the ruleset in lvsd's nft tables; "" if none
}

// ActualService is a kernel service and its destinations in kernel list order.
type ActualService struct {
	ipvs.Service
	Destinations []ipvs.Destination
}

// Ownership is what lvsd created and may therefore change or remove.
// Anything else in the kernel belongs to someone else (an operator's
// ipvsadm, kube-proxy) and is never touched unless the configuration asks for
// exactly that object, in which case lvsd adopts it.
type Ownership struct {
	Services  []ipvs.ServiceKey `json:"services"`
	Addresses []OwnedAddress    `json:"addresses"`
}

// OwnedAddress is an address lvsd put on an interface.
type OwnedAddress struct {
	Interface string       `json:"interface"`
	Prefix    netip.Prefix `json:"prefix"`
}

// DrainDone reports whether a destination that is no longer wanted, already
// at weight 0, may now be deleted (its connections ended or its drain timed out).
type DrainDone func(svc ipvs.ServiceKey, dst ipvs.Destination) bool

// Plan returns the changes that take the kernel from actual to desired,
// touching only owned or desired objects. It is pure. Unchanged objects get
// no op; a plan computed right after applying its predecessor is empty.
//
// A destination or service that leaves the configuration is drained, never
// cut: first its weight goes to 0 (no new connections, existing ones go on),
// and only when done(...) says so is it deleted.
func Plan(d Desired, a Actual, owned Ownership, done DrainDone) []Op {
	var ops []Op
	draining := map[netip.Addr]bool{} // addresses still in use by IPVS services
	wanted := map[ipvs.ServiceKey]bool{}
	for _, vs := range d.Services {
		wanted[vs.ServiceKey] = true
		cur, ok := a.Services[vs.ServiceKey]
		if !ok {
			ops = append(ops, planNewService(vs)...)
			continue
		}
		if !cur.SameOptions(vs.Service) {
			ops = append(ops, Op{Kind: UpdateService, Service: vs.Service, Reason: "options changed"})
		}
		ops = append(ops, planDestinations(vs, cur, done)...)
	}
	for _, k := range owned.Services {
		cur, ok := a.Services[k]
		if wanted[k] || !ok {
			continue
		}
		drain := planDestinations(VirtualService{Service: cur.Service}, cur, done)
		if len(drain) == len(cur.Destinations) && !slices.ContainsFunc(drain, func(o Op) bool { return o.Kind != DeleteDestination }) {
			// Every destination has drained: the service itself can go.
			ops = append(ops, Op{Kind: DeleteService, Service: cur.Service, Reason: "no longer configured"})
			continue
		}
		ops = append(ops, drain...)
		draining[cur.Addr] = true
	}
	// An address also serves IPVS services that are not lvsd's (an
	// operator's ipvsadm service on the same VIP): removing it would cut them off.
	for k, cur := range a.Services {
		if !wanted[k] && !slices.Contains(owned.Services, k) {
			draining[cur.Addr] = true
		}
	}
	switch {
	case d.NAT.Digest() == a.NATDigest:
	case !d.NAT.Empty():
		ops = append(ops, Op{Kind: ReplaceNAT, NAT: d.NAT})
	case a.NATDigest != "":
		ops = append(ops, Op{Kind: RemoveNAT, Reason: "no rules needed"})
	}
	return append(ops, planAddresses(d, a, owned, draining)...)
}

// planNewService creates a service, then its destinations in canonical order.
//
// Creating an mh service as rr and switching it to mh once filled would
// build the Maglev table once instead of once per destination, but measured
// slower: the kernel waits for an RCU grace period on every scheduler change
// (ip_vs_edit_service), which costs more than the rebuilds (docs/performance.md).
func planNewService(vs VirtualService) []Op {
	ops := []Op{{Kind: AddService, Service: vs.Service, Reason: "service " + vs.Name}}
	for i := range vs.Destinations {
		ops = append(ops, addDestination(vs, i)...)
	}
	return ops
}

// addDestination adds destination i of vs. One wanted at weight 0 is added
// with its slot weight first and then lowered, so that it holds its Maglev
// slots (its flows fall back to the others through mh-fallback).
func addDestination(vs VirtualService, i int) []Op {
	dst := vs.Destinations[i]
	if dst.Weight != 0 || i >= len(vs.SlotWeights) || vs.SlotWeights[i] == 0 {
		return []Op{{Kind: AddDestination, Service: vs.Service, Destination: dst}}
	}
	slotted := dst
	slotted.Weight = vs.SlotWeights[i]
	return []Op{
		{Kind: AddDestination, Service: vs.Service, Destination: slotted, Reason: "with its slot weight"},
		{Kind: UpdateDestination, Service: vs.Service, Destination: dst, Reason: "not eligible"},
	}
}

func planDestinations(vs VirtualService, cur ActualService, done DrainDone) []Op {
	var ops []Op
	have := map[ipvs.DestinationKey]ipvs.Destination{}
	for _, dst := range cur.Destinations {
		have[dst.DestinationKey] = dst
	}
	want := map[ipvs.DestinationKey]bool{}
	for i, dst := range vs.Destinations {
		want[dst.DestinationKey] = true
		old, ok := have[dst.DestinationKey]
		switch {
		case !ok:
			ops = append(ops, addDestination(vs, i)...)
		case !old.SameOptions(dst):
			ops = append(ops, Op{Kind: UpdateDestination, Service: vs.Service, Destination: dst})
		}
	}
	for _, dst := range cur.Destinations {
		if want[dst.DestinationKey] {
			continue
		}
		switch {
		case dst.Weight != 0:
			drained := dst
			drained.Weight = 0
			ops = append(ops, Op{Kind: UpdateDestination, Service: vs.Service, Destination: drained, Reason: "draining"})
		case done(vs.ServiceKey, dst):
			ops = append(ops, Op{Kind: DeleteDestination, Service: vs.Service, Destination: dst, Reason: "drained"})
		}
	}
	return ops
}

func planAddresses(d Desired, a Actual, owned Ownership, draining map[netip.Addr]bool) []Op {
	var ops []Op
	for _, p := range d.Addresses {
		if !slices.Contains(a.Addresses, p) {
			ops = append(ops, Op{Kind: AddAddress, Interface: d.Interface, Address: p, Reason: "VIP"})
		}
	}
	for _, o := range owned.Addresses {
		if o.Interface == d.Interface && slices.Contains(d.Addresses, o.Prefix) || draining[o.Prefix.Addr()] {
			continue
		}
		// Owned addresses on other interfaces are not in Actual; the apply
		// step tolerates their absence.
		if o.Interface != d.Interface || slices.Contains(a.Addresses, o.Prefix) {
			ops = append(ops, Op{Kind: DeleteAddress, Interface: o.Interface, Address: o.Prefix, Reason: "no longer configured"})
		}
	}
	return ops
}
