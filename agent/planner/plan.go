package planner

import (
	"maps"
	"net/netip"
	"slices"
	"strings"
	"time"

	ipvs "github.com/lvsd/lvsd/ipvs/spec"
)

// Actual is the host state as read back.
type Actual struct {
	Services  ServiceTable
	NATDigest string            // digest of the ruleset in lvsd's nft tables; "" if none
	Sysctls   map[string]string // the desired keys that exist, with their values
	Daemons   []ipvs.Daemon     // running sync daemons
	// Timeouts are the IPVS timeouts in force; read only when the desired
	// state sets one (zero otherwise).
	Timeouts ipvs.Timeouts
	// TOA is the director's TOA program as found.
	TOA TOA
}

// ServiceTable is the kernel's IPVS services by key: a copy per pass costs
// what the pass changes (CopyOnWriteMap).
type ServiceTable = CopyOnWriteMap[ipvs.ServiceKey, ActualService]

// ActualService is a kernel service and its destinations in kernel list order.
type ActualService struct {
	ipvs.Service
	Destinations []ipvs.Destination
	// ReadAt is when a pass read the destinations back or made the
	// service (zero: not by a pass): passes read only what they look at,
	// so the numbers of one service can be older than those of another.
	ReadAt time.Time
}

// Drains records, for every destination lvsd no longer wants, when it
// went to weight 0; it is deleted once its connections are gone or its drain
// timeout passed.
type Drains map[DrainKey]time.Time

// DrainKey names one destination of one service.
type DrainKey struct {
	Service     ipvs.ServiceKey
	Destination ipvs.DestinationKey
}

// PlanInput is everything the data-plane plan depends on.
type PlanInput struct {
	Desired Desired // with health applied (WithHealth)
	Actual  Actual
	Owned   Ownership
	Drains  Drains
	Now     time.Time
	// DrainTimeout is how long a destination of a service that left the
	// configuration drains (the others take their service's drain_timeout).
	DrainTimeout time.Duration
	// Resets are the connection resets the last health decision asks for
	// (ConnectionResets).
	Resets map[string]Reset
	// Scope limits the IPVS part of the plan to these services (sorted):
	// the desired ones among them and those owned and no longer desired.
	// The others are taken as they are, and their drain records kept; their
	// entries in Actual need not have been read. nil: every service.
	Scope []ipvs.ServiceKey
	// SkipGlobals leaves the sysctls, the sync daemons and the nftables
	// tables out, for a pass that did not read them back.
	SkipGlobals bool
	// Room is how many ops the caller will append to the plan (the VIP
	// holder's): they are reserved with the plan's own, so that appending
	// them does not copy a cold start's 110,000 ops.
	Room int
}

// Plan returns the changes that take the data plane from in.Actual to
// in.Desired, touching only owned or desired objects, and the drain record
// after them. It is pure. Unchanged objects get no op; a plan computed right
// after applying its predecessor is empty.
//
// The order: sysctls (sync daemons read some only when they start), sync
// daemons to stop (before the nftables guard that fences them goes), IPVS
// services and destinations, the nftables tables, sync daemons to start
// (after their guard), the TOA program, connection resets.
//
// A destination or service that leaves the configuration is drained, never
// cut: first its weight goes to 0 (no new connections, existing ones go on),
// and only once its connections are gone or its drain timed out is it deleted.
func Plan(in PlanInput) ([]Op, Drains) {
	p := planner{in: in, drains: Drains{}}
	if in.Scope != nil {
		for k, t := range in.Drains {
			if _, in := slices.BinarySearchFunc(in.Scope, k.Service, ipvs.ServiceKey.Compare); !in {
				p.drains[k] = t
			}
		}
	}
	var ops, start []Op
	if !in.SkipGlobals {
		var stop []Op
		ops = append(planSysctls(in.Desired, in.Actual), planTimeouts(in.Desired, in.Actual)...)
		stop, start = planDaemons(in.Desired, in.Actual)
		ops = append(ops, stop...)
	}
	ops = p.services(ops)
	if !in.SkipGlobals {
		nft := planNAT(in.Desired, in.Actual)
		ops = append(ops, nft...)
		if len(nft) > 0 || in.Actual.NATDigest == in.Desired.NAT.Digest() {
			ops = append(ops, start...) // never a daemon without its guard
		}
		ops = append(ops, planTOA(in.Desired.TOA, in.Actual.TOA)...)
	}
	ops = append(ops, planResets(in.Desired, in.Actual, in.Resets)...)
	return ops, p.drains
}

type planner struct {
	in     PlanInput
	drains Drains // the record after this plan
}

// services appends the ops of the IPVS services in scope to ops.
func (p *planner) services(ops []Op) []Op {
	d, a := p.in.Desired, p.in.Actual
	desired, owned := d.Services, p.in.Owned.Services
	if p.in.Scope != nil {
		desired, owned = nil, nil
		for _, k := range p.in.Scope {
			if vs, ok := FindService(d, k); ok {
				desired = append(desired, vs)
			} else {
				owned = append(owned, k) // planned below if owned
			}
		}
	}
	// An Op is large (176 bytes), and a cold start of 10,000 services plans
	// 110,000 of them: grown by appending they were copied over and over
	// (at 1,000 services under emulation, half the planning's time).
	ops = slices.Grow(ops, newServiceOps(desired, a)+8+p.in.Room) // + the nftables and daemon ops planned after, the caller's
	wanted := make(map[ipvs.ServiceKey]bool, len(desired))        // sized by the scope: a scoped pass costs what it looks at
	for _, vs := range desired {
		wanted[vs.ServiceKey] = true
		cur, ok := a.Services.Get(vs.ServiceKey)
		if !ok {
			ops = appendNewService(ops, vs)
			continue
		}
		if !cur.SameOptions(vs.Service) {
			ops = append(ops, Op{Kind: UpdateService, Service: vs.Service, Reason: "options changed"})
		}
		ops = append(ops, p.destinations(vs, cur, vs.DrainTimeout)...)
	}
	for _, k := range owned {
		cur, ok := a.Services.Get(k)
		if wanted[k] || !ok || !p.in.Owned.Owns(k) {
			continue
		}
		drain := p.destinations(&VirtualService{Service: cur.Service}, cur, p.in.DrainTimeout)
		if len(drain) == len(cur.Destinations) && !slices.ContainsFunc(drain, func(o Op) bool { return o.Kind != DeleteDestination }) {
			// Every destination has drained: the service itself can go.
			ops = append(ops, Op{Kind: DeleteService, Service: cur.Service, Reason: "no longer configured"})
			continue
		}
		ops = append(ops, drain...)
	}
	return ops
}

// appendNewService appends the ops that create a service, then its
// destinations in canonical order.
//
// Creating an mh service as rr and switching it to mh once filled would
// build the Maglev table once instead of once per destination, but measured
// slower: the kernel waits for an RCU grace period on every scheduler change
// (ip_vs_edit_service), which costs more than the rebuilds (docs/performance.md).
func appendNewService(ops []Op, vs *VirtualService) []Op {
	ops = append(ops, Op{Kind: AddService, Service: vs.Service, Reason: "service " + vs.Name})
	for _, dst := range vs.Destinations {
		ops = appendDestination(ops, vs, dst)
	}
	return ops
}

// newServiceOps is about how many ops creating the services of desired
// missing from a takes (a destination at weight 0 takes two).
func newServiceOps(desired []*VirtualService, a Actual) int {
	n := 0
	for _, vs := range desired {
		if _, ok := a.Services.Get(vs.ServiceKey); !ok {
			n += 1 + len(vs.Destinations)
		}
	}
	return n
}

// appendDestination appends the ops that add dst to svc. One wanted at
// weight 0 is added with its slot weight first and then lowered, so that
// it holds its Maglev slots (its flows fall back to the others through
// mh-fallback).
func appendDestination(ops []Op, vs *VirtualService, dst Destination) []Op {
	if dst.Weight != 0 || dst.SlotWeight == 0 {
		return append(ops, Op{Kind: AddDestination, Service: vs.Service, Destination: vs.Kernel(dst)})
	}
	slotted := vs.Kernel(dst)
	slotted.Weight = int(dst.SlotWeight)
	return append(ops,
		Op{Kind: AddDestination, Service: vs.Service, Destination: slotted, Reason: "with its slot weight"},
		Op{Kind: UpdateDestination, Service: vs.Service, Destination: vs.Kernel(dst), Reason: "not eligible"})
}

// canonicalPrefix returns how many of the wanted destinations, from the
// first, are in the kernel's list in the order a director that made the
// service now would have them: it adds them in canonical order and the
// kernel adds at the head, so read from the tail the list is the wanted
// order. Maglev fills its table visiting destinations in list order, so
// the order decides the table: directors whose lists differ (one had a
// backend added later, which went to the head) schedule some flows
// differently. The destinations from there on are moved (deleted and added
// again, in order) so that every director's list is the same whatever its
// history; destinations lvsd no longer wants are left where they are.
func canonicalPrefix(want []Destination, kernel []ipvs.Destination) int {
	return canonicalPrefixAt(want, len(kernel), destinationIndex(kernel, kernelKey))
}

// canonicalPrefixAt is canonicalPrefix with the kernel's list of n
// destinations looked up by at (destinationIndex).
func canonicalPrefixAt(want []Destination, n int, at func(ipvs.DestinationKey) int) int {
	last := -1
	for i, d := range want {
		j := at(d.Key())
		if j < 0 || n-1-j < last {
			return i
		}
		last = n - 1 - j
	}
	return len(want)
}

// scannedList is the longest list of destinations a service's plan looks
// up by scanning it. Three maps of a service's destinations, built for
// every service planned, were 3.4 kB and 9 allocations a service (34 MB of
// garbage for a full pass over 10,000 services planning nothing) and most
// of an idle director's planning; scanning 10 keys costs less than hashing
// them.
const scannedList = 16

// destinationIndex returns where a destination of list is by its key (-1:
// not there): by scanning a short list, through a map of a long one.
func destinationIndex[D any](list []D, key func(*D) ipvs.DestinationKey) func(ipvs.DestinationKey) int {
	if len(list) <= scannedList {
		return func(k ipvs.DestinationKey) int {
			for i := range list {
				if key(&list[i]) == k {
					return i
				}
			}
			return -1
		}
	}
	m := make(map[ipvs.DestinationKey]int, len(list))
	for i := range list {
		m[key(&list[i])] = i
	}
	return func(k ipvs.DestinationKey) int {
		if i, ok := m[k]; ok {
			return i
		}
		return -1
	}
}

func kernelKey(d *ipvs.Destination) ipvs.DestinationKey { return d.DestinationKey }
func wantedKey(d *Destination) ipvs.DestinationKey      { return d.Key() }

// AppendMove appends the ops that move dst to the head of svc's list,
// keeping its connections: the move (a delete and an add, Kernel.move)
// between two SetSysctl ops that hold expire_nodest_conn at 0 and set it
// back. The kernel keeps a deleted destination in its trash with its
// connections, and an add of the same one takes it back; but with
// expire_nodest_conn set the delete also queues the expiry of those
// connections, due a jiffy later. Held at 0, a packet in between is
// dropped, not the connection; and nothing moves if it cannot be held
// (Kernel.Apply). One wanted at weight 0 comes back with its slot weight
// and is lowered after, as appendDestination does.
func AppendMove(ops []Op, vs *VirtualService, dst Destination) []Op {
	wanted := ipvs.ConnectionExpirySysctls()[ipvs.ExpireNodestConn]
	why := "held across the move of " + dst.Key().String()
	ops = append(ops, Op{Kind: SetSysctl, Reason: why, Hold: HoldForMove, Detail: &Detail{Key: ipvs.ExpireNodestConn, Value: "0", Previous: wanted}})
	n := len(ops)
	ops = appendDestination(ops, vs, dst)
	ops[n].Kind, ops[n].Reason = MoveDestination, "into canonical order"
	return slices.Insert(ops, n+1, Op{Kind: SetSysctl, Reason: "set back after the move of " + dst.Key().String(),
		Hold: ReleaseAfterMove, Detail: &Detail{Key: ipvs.ExpireNodestConn, Value: wanted, Previous: "0"}})
}

// destinations plans the destinations of one service: adds and updates for
// the wanted ones, the drain of the others.
func (p *planner) destinations(vs *VirtualService, cur ActualService, timeout time.Duration) []Op {
	var ops []Op
	have := destinationIndex(cur.Destinations, kernelKey)
	inOrder := canonicalPrefixAt(vs.Destinations, len(cur.Destinations), have)
	for i, dst := range vs.Destinations {
		j := have(dst.Key())
		switch {
		case j < 0:
			ops = appendDestination(ops, vs, dst)
		case i >= inOrder:
			ops = AppendMove(ops, vs, dst)
		case !cur.Destinations[j].SameOptions(vs.Kernel(dst)):
			ops = append(ops, Op{Kind: UpdateDestination, Service: vs.Service, Destination: vs.Kernel(dst)})
		}
	}
	wanted := destinationIndex(vs.Destinations, wantedKey)
	for _, dst := range cur.Destinations {
		if wanted(dst.DestinationKey) < 0 {
			ops = append(ops, p.drain(vs.Service, dst, timeout)...)
		}
	}
	return ops
}

// drain plans one unwanted destination: weight 0 first, delete once its
// connections are gone or its drain timed out. A destination found at weight
// 0 without a record (after a restart) starts its clock now.
func (p *planner) drain(svc ipvs.Service, dst ipvs.Destination, timeout time.Duration) []Op {
	k := DrainKey{svc.ServiceKey, dst.DestinationKey}
	if dst.Weight != 0 {
		p.drains[k] = p.in.Now
		drained := dst
		drained.Weight = 0
		return []Op{{Kind: UpdateDestination, Service: svc, Destination: drained, Reason: "draining"}}
	}
	started, ok := p.in.Drains[k]
	if !ok {
		started = p.in.Now
	}
	switch {
	case dst.ActiveConns == 0 && dst.InactiveConns == 0:
		return []Op{{Kind: DeleteDestination, Service: svc, Destination: dst, Reason: "drained"}}
	case p.in.Now.Sub(started) >= timeout:
		return []Op{{Kind: DeleteDestination, Service: svc, Destination: dst, Reason: "drain timeout"}}
	}
	p.drains[k] = started
	return nil
}

// planSysctls sets every desired sysctl whose value differs, in key order.
// Values compare by fields: the kernel prints vectors tab-separated.
func planSysctls(d Desired, a Actual) []Op {
	var ops []Op
	for _, k := range slices.Sorted(maps.Keys(d.Sysctls)) {
		want := d.Sysctls[k]
		cur, ok := a.Sysctls[k]
		if ok && strings.Join(strings.Fields(cur), " ") == want {
			continue
		}
		if !ok {
			cur = "missing"
		}
		ops = append(ops, Op{Kind: SetSysctl, Detail: &Detail{Key: k, Value: want, Previous: cur}})
	}
	return ops
}

// planTimeouts sets the IPVS timeouts the desired state sets and the
// kernel does not have, and only those: the others are someone else's to
// choose. The op names what it found, for the log and lvsd plan.
func planTimeouts(d Desired, a Actual) []Op {
	set := a.Timeouts.Differs(d.Timeouts)
	if set.IsZero() {
		return nil
	}
	return []Op{{Kind: SetTimeouts, Detail: &Detail{Timeouts: set, PreviousTimeouts: a.Timeouts.Only(set)}}}
}

// planNAT replaces lvsd's nftables tables when their digest differs, or
// removes them when nothing needs them.
func planNAT(d Desired, a Actual) []Op {
	switch {
	case d.NAT.Digest() == a.NATDigest:
		return nil
	case !d.NAT.Empty():
		return []Op{{Kind: ReplaceNAT, Detail: &Detail{NAT: d.NAT}}}
	case a.NATDigest != "":
		return []Op{{Kind: RemoveNAT, Reason: "no rules needed"}}
	}
	return nil
}

// planDaemons starts the desired sync daemons that do not run as wanted and
// stops lvsd's that are no longer wanted (connection sync turned off).
// Daemons of other software (another sync ID) are replaced only where lvsd
// wants that role.
func planDaemons(d Desired, a Actual) (stop, start []Op) {
	for _, want := range d.Daemons {
		i := slices.IndexFunc(a.Daemons, func(r ipvs.Daemon) bool { return r.State == want.State })
		if i < 0 || !a.Daemons[i].Satisfies(want) {
			start = append(start, Op{Kind: StartDaemon, Reason: "connection sync", Detail: &Detail{Daemon: want}})
		}
	}
	for _, r := range a.Daemons {
		wanted := slices.ContainsFunc(d.Daemons, func(w ipvs.Daemon) bool { return w.State == r.State })
		if r.SyncID == SyncID && !wanted {
			stop = append(stop, Op{Kind: StopDaemon, Reason: "connection sync off", Detail: &Detail{Daemon: r}})
		}
	}
	return stop, start
}

// AddressesInUse are the addresses the VIP holder must keep even when no
// held VIP wants them: the VIPs of IPVS services in a that d does not want
// and ops (the plan for a) do not delete — lvsd's services still draining,
// whose connections need the address, and services that are not lvsd's (an
// operator's ipvsadm service on the same VIP).
func AddressesInUse(d Desired, a Actual, ops []Op) map[netip.Addr]bool {
	return UnwantedIn(d, a).Addresses(ops)
}

// UnwantedServices are the IPVS services of the kernel that lvsd does not
// want (AddressesInUse). The agent keeps them from pass to pass and looks
// again only at the services a pass read back: testing each of 10,000
// kernel services against the desired list was a third of a one-file
// change.
type UnwantedServices map[ipvs.ServiceKey]bool

// UnwantedIn returns the services of a that d does not want.
func UnwantedIn(d Desired, a Actual) UnwantedServices {
	u := UnwantedServices{}
	for k := range a.Services.Keys() {
		u.Look(d, a, k)
	}
	return u
}

// look records whether service k of a is one d does not want. Services
// without an address (fwmark) hold none.
func (u UnwantedServices) Look(d Desired, a Actual, k ipvs.ServiceKey) {
	if _, inKernel := a.Services.Get(k); inKernel && k.Addr.IsValid() && !d.Wants(k) {
		u[k] = true
	} else {
		delete(u, k)
	}
}

// addresses are the addresses of the unwanted services that ops do not
// delete.
func (u UnwantedServices) Addresses(ops []Op) map[netip.Addr]bool {
	var deleted map[ipvs.ServiceKey]bool
	for _, op := range ops {
		if op.Kind == DeleteService && u[op.Service.ServiceKey] {
			if deleted == nil {
				deleted = map[ipvs.ServiceKey]bool{}
			}
			deleted[op.Service.ServiceKey] = true
		}
	}
	out := map[netip.Addr]bool{}
	for k := range u {
		if !deleted[k] {
			out[k.Addr.Unmap()] = true
		}
	}
	return out
}

// Applied makes out what it is once ops ran with errs (errs[i] is op i's): the
// IPVS services and destinations added, updated and deleted, counters as
// read. The status answers from it without reading the kernel again. It
// changes out's Services map itself: the caller's own copy (a pass's
// read-back; cloning 10,000 services per pass cost more than the rest of a
// one-file change).
func (out *Actual) Applied(ops []Op, errs []error) {
	// A service's destinations are copied once, with room for what ops add
	// to it, and changed in place from then on: copied for every op, the
	// 10 destinations of each of 10,000 new services made 40 MB of garbage
	// at a cold start.
	adds := map[ipvs.ServiceKey]int{}
	for i, op := range ops {
		if errs[i] == nil && op.Kind == AddDestination {
			adds[op.Service.ServiceKey]++
		}
	}
	own := map[ipvs.ServiceKey]bool{} // destinations copied by this call: not shared yet
	for i, op := range ops {
		if errs[i] != nil {
			continue
		}
		key := op.Service.ServiceKey
		cur := out.Services.At(key)
		switch op.Kind {
		case SetTimeouts:
			out.Timeouts = out.Timeouts.Over(op.Timeouts)
		case SetTOAServices, AttachTOA, DetachTOA, RemoveTOA:
			out.TOA = appliedTOA(out.TOA, op)
		case AddService, UpdateService:
			cur.Service = op.Service
			out.Services.Set(key, cur)
		case DeleteService:
			out.Services.Delete(key)
			delete(own, key)
		case AddDestination, UpdateDestination:
			dsts := cur.Destinations
			if !own[key] {
				dsts = append(make([]ipvs.Destination, 0, len(dsts)+adds[key]), dsts...)
				own[key] = true
			}
			if j := slices.IndexFunc(dsts, func(d ipvs.Destination) bool { return d.DestinationKey == op.Destination.DestinationKey }); j >= 0 {
				d := &dsts[j]
				d.Weight, d.Forwarding, d.Tunnel = op.Destination.Weight, op.Destination.Forwarding, op.Destination.Tunnel
				d.UpperThreshold, d.LowerThreshold = op.Destination.UpperThreshold, op.Destination.LowerThreshold
			} else {
				dsts = slices.Insert(dsts, 0, op.Destination) // the kernel adds at the head
			}
			cur.Destinations = dsts
			out.Services.Set(key, cur)
		case DeleteDestination:
			cur.Destinations, _ = withoutDestination(cur.Destinations, op.Destination.DestinationKey)
			out.Services.Set(key, cur)
			delete(own, key) // no room left in the copy
		case MoveDestination:
			// Back from the kernel's trash: its connections and counters too.
			moved := op.Destination
			rest, old := withoutDestination(cur.Destinations, moved.DestinationKey)
			if old != nil {
				moved.ActiveConns, moved.InactiveConns, moved.Stats = old.ActiveConns, old.InactiveConns, old.Stats
			}
			cur.Destinations = append([]ipvs.Destination{moved}, rest...)
			out.Services.Set(key, cur)
			delete(own, key)
		}
	}
}

// withoutDestination returns a copy of dsts without the destination k,
// and that destination (nil when it was not there).
func withoutDestination(dsts []ipvs.Destination, k ipvs.DestinationKey) ([]ipvs.Destination, *ipvs.Destination) {
	out := make([]ipvs.Destination, 0, len(dsts))
	var found *ipvs.Destination
	for i := range dsts {
		if dsts[i].DestinationKey == k {
			found = &dsts[i]
			continue
		}
		out = append(out, dsts[i])
	}
	return out, found
}

// NewServiceTable is a table holding m's services.
func NewServiceTable(m map[ipvs.ServiceKey]ActualService) ServiceTable {
	var t ServiceTable
	for k, v := range m {
		t.Set(k, v)
	}
	return t
}
