package planner

import (
	"fmt"
	"net/netip"
	"strings"

	arp "github.com/lvsd/lvsd/arp/spec"
	"github.com/lvsd/lvsd/cluster/bgp/route"
	ipvs "github.com/lvsd/lvsd/ipvs/spec"
	nat "github.com/lvsd/lvsd/nat/rules"
)

// OpKind is the kind of one change to the host.
type OpKind int

// Kinds of change, in the order a plan of the data plane runs them.
const (
	SetSysctl OpKind = iota
	// SetTimeouts sets IPVS idle timeouts (namespace-wide).
	SetTimeouts
	AddService
	UpdateService
	AddDestination
	UpdateDestination
	DeleteDestination
	DeleteService
	ReplaceNAT
	RemoveNAT
	// AwaitExpiry waits until the kernel has dropped the connection entries
	// of destinations just deleted to reset their connections.
	AwaitExpiry
	// StartDaemon and StopDaemon run or stop one of the kernel's
	// connection-sync daemons.
	StartDaemon
	StopDaemon

	// The kinds of a takeover and a release (PlanAddresses).

	// RestoreConntrack creates the conntrack entries of the FULLNAT
	// connections of VIPs this director is taking over, from the IPVS
	// connections the sync daemon brought, before their addresses arrive.
	RestoreConntrack
	AddAddress
	// Announce tells the link that an address is here now (gratuitous ARP,
	// unsolicited neighbour advertisement).
	Announce
	DeleteAddress
	// ReleaseConnections tells the connection-sync relay that another
	// director holds a VIP now, whose connections it no longer sends.
	ReleaseConnections
	// AnnounceRoute and WithdrawRoute announce a VIP to the routers over
	// BGP, or withdraw it.
	AnnounceRoute
	WithdrawRoute

	// MoveDestination deletes a destination and adds it again at once,
	// which puts it at the head of the kernel's list (planned to bring the
	// list to canonical order, canonicalPrefix), keeping its connections.
	// The plan puts it between the SetSysctl ops that hold
	// expire_nodest_conn at 0 and set it back (Op.Hold, appendMove).
	MoveDestination

	// The kinds a real server's plan adds (PlanRealServer). It also uses
	// SetSysctl (Previous is what cleanup restores), AddAddress and
	// DeleteAddress (on Loopback), ReplaceNAT and RemoveNAT (the MSS clamp).

	// RestoreSysctl writes back the value lvsd found (Value).
	RestoreSysctl
	// CreateLink makes tunnel device Link of its Kind exist (loading its
	// module).
	CreateLink
	// SetLinkUp brings tunnel device Link up; SetLinkDown takes it down
	// again (lvsd brought it up).
	SetLinkUp
	SetLinkDown
	// DeleteLink deletes tunnel device Link (lvsd created it).
	DeleteLink
	// AddFouPort opens GUE receive port Fou; DeleteFouPort closes it.
	AddFouPort
	DeleteFouPort
	// The Forget kinds drop an object from the ownership record only:
	// someone else removed or changed it since lvsd made it.
	ForgetAddress
	ForgetSysctl
	ForgetLink
	ForgetFouPort
	ForgetNAT

	// The kinds of the director's TOA program (toa.go): SetTOAServices
	// makes its VIP:ports TOAServices, AttachTOA and DetachTOA put it on
	// and take it off Interface, RemoveTOA detaches it everywhere and
	// deletes its pinned objects.
	SetTOAServices
	AttachTOA
	DetachTOA
	RemoveTOA
)

// SysctlHold is the part a SetSysctl op plays around the MoveDestination
// that follows it: Kernel.Apply runs the three as one, in order.
type SysctlHold uint8

const (
	// NotHeld: an ordinary SetSysctl.
	NotHeld SysctlHold = iota
	// HoldForMove sets the sysctl for the move that follows, which runs
	// only once this succeeded.
	HoldForMove
	// ReleaseAfterMove sets it back after the move, whether the move
	// succeeded or not; it runs only if the hold succeeded (else nothing
	// changed).
	ReleaseAfterMove
)

var opNames = [...]string{"set-sysctl", "set-ipvs-timeouts", "add-service", "update-service", "add-destination",
	"update-destination", "delete-destination", "delete-service", "replace-nft-tables",
	"remove-nft-tables", "await-expiry", "start-daemon", "stop-daemon", "restore-conntrack", "add-address",
	"announce", "delete-address", "release-connections", "announce-route", "withdraw-route", "move-destination",
	"restore-sysctl", "create-link", "set-link-up", "set-link-down", "delete-link", "add-fou", "delete-fou",
	"forget-address", "forget-sysctl", "forget-link", "forget-fou", "forget-nft",
	"toa-services", "toa-attach", "toa-detach", "toa-remove"}

func (k OpKind) String() string { return opNames[k] }

// Op is one change to the host. Reason says why, for logs and `lvsd plan`.
type Op struct {
	Kind        OpKind
	Service     ipvs.Service
	Destination ipvs.Destination
	Reason      string
	Hold        SysctlHold // SetSysctl: its part around a MoveDestination
	// Guard marks a real server's SetSysctl that must succeed before any
	// VIP is added to Loopback (ARP suppression).
	Guard bool
	// Detail is what the ops other than those of IPVS services and
	// destinations change, nil for those: read its fields only for the
	// kinds that set them. A cold start of 10,000 services plans 110,000
	// IPVS ops, and with these fields in each op they were 530 bytes of
	// its 704 (58 MB).
	*Detail
}

// Detail is what an op outside IPVS services and destinations changes.
type Detail struct {
	Interface  string
	Address    netip.Prefix
	VIPs       []netip.Addr  // RestoreConntrack, ReleaseConnections
	Key, Value string        // SetSysctl
	Previous   string        // SetSysctl: the value found (held: the value before the hold)
	Fou        arp.FouPort   // AddFouPort, DeleteFouPort, ForgetFouPort
	NAT        nat.Ruleset   // ReplaceNAT: the tables; RestoreConntrack: the ruleset in force
	Expiring   ipvs.Expiring // AwaitExpiry: whose connections
	Daemon     ipvs.Daemon   // StartDaemon, StopDaemon (its State)
	Route      route.Route   // AnnounceRoute; WithdrawRoute: its Prefix
	Link       TunnelLink    // the link ops (its Kind only for CreateLink)
	// Timeouts are the IPVS timeouts a SetTimeouts op sets (the others
	// zero) and PreviousTimeouts what it found of them.
	Timeouts, PreviousTimeouts ipvs.Timeouts
	// TOAServices are the VIP:ports a SetTOAServices op gives the
	// director's TOA program.
	TOAServices []netip.AddrPort
}

func (o Op) String() string {
	s := o.Describe()
	if o.Reason != "" {
		s += " (" + o.Reason + ")"
	}
	return s
}

// Describe says what o changes, without its reason.
func (o Op) Describe() string {
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
	case SetTOAServices:
		return fmt.Sprintf("%s %s", o.Kind, describeTOAServices(o.TOAServices))
	case AttachTOA, DetachTOA:
		return fmt.Sprintf("%s %s", o.Kind, o.Interface)
	case RemoveTOA:
		return o.Kind.String()
	case ForgetNAT:
		return fmt.Sprintf("%s ip/ip6 %s", o.Kind, nat.TableName)
	case SetTimeouts:
		return fmt.Sprintf("%s %s (was %s)", o.Kind, o.Timeouts, o.PreviousTimeouts)
	case AddAddress, DeleteAddress, ForgetAddress, Announce:
		return fmt.Sprintf("%s %s dev %s", o.Kind, o.Address, o.Interface)
	case AddService, UpdateService:
		return fmt.Sprintf("%s %s", o.Kind, o.Service)
	case DeleteService:
		return fmt.Sprintf("%s %s", o.Kind, o.Service.ServiceKey)
	case DeleteDestination:
		return fmt.Sprintf("%s %s -> %s", o.Kind, o.Service.ServiceKey, o.Destination.DestinationKey)
	case ReplaceNAT:
		return fmt.Sprintf("%s ip/ip6 %s (ruleset %s)", o.Kind, nat.TableName, o.NAT.Digest())
	case RemoveNAT:
		return fmt.Sprintf("%s ip/ip6 %s", o.Kind, nat.TableName)
	case AwaitExpiry:
		return fmt.Sprintf("%s %s -> %v", o.Kind, o.Service.ServiceKey, o.Expiring.Dests)
	case StartDaemon:
		return fmt.Sprintf("%s %s", o.Kind, o.Daemon)
	case StopDaemon:
		return fmt.Sprintf("%s %s", o.Kind, o.Daemon.State)
	case RestoreConntrack, ReleaseConnections:
		return fmt.Sprintf("%s %v", o.Kind, o.VIPs)
	case AnnounceRoute:
		return fmt.Sprintf("%s %s%s", o.Kind, o.Route.Prefix, routeAttrs(o.Route))
	case WithdrawRoute:
		return fmt.Sprintf("%s %s", o.Kind, o.Route.Prefix)
	}
	s := fmt.Sprintf("%s %s -> %s weight %d %s", o.Kind, o.Service.ServiceKey, o.Destination.DestinationKey,
		o.Destination.Weight, o.Destination.Method())
	if t := o.Destination.Thresholds(); t != "" {
		s += " " + t
	}
	return s
}

// routeAttrs lists a route's attributes that are set, for lvsd plan.
func routeAttrs(r route.Route) string {
	var s string
	if len(r.Communities) > 0 {
		s += fmt.Sprintf(" communities %v", r.Communities)
	}
	if len(r.LargeCommunities) > 0 {
		s += fmt.Sprintf(" large-communities %v", r.LargeCommunities)
	}
	if r.LocalPref != 0 {
		s += fmt.Sprintf(" local-pref %d", r.LocalPref)
	}
	if r.MED != nil {
		s += fmt.Sprintf(" med %d", *r.MED)
	}
	if r.ASPathPrepend > 0 {
		s += fmt.Sprintf(" as-path-prepend %d", r.ASPathPrepend)
	}
	return s
}

// Summarize counts ops by kind, e.g. "add-service=2 add-destination=20".
func Summarize(ops []Op) string {
	var c OpCounts
	c.Add(ops)
	return c.String()
}

// OpCounts counts ops by kind: what a plan applied in parts did, once its
// ops are gone.
type OpCounts [len(opNames)]int

// Add counts ops.
func (c *OpCounts) Add(ops []Op) {
	for _, op := range ops {
		c[op.Kind]++
	}
}

// Total is how many ops were counted, and changes those that change the
// host (all but the waits, AwaitExpiry).
func (c OpCounts) Total() (total, changes int) {
	for k, n := range c {
		total += n
		if OpKind(k) != AwaitExpiry {
			changes += n
		}
	}
	return total, changes
}

// String reads as Summarize's "add-service=2 add-destination=20".
func (c OpCounts) String() string {
	var parts []string
	for k, n := range c {
		if n > 0 {
			parts = append(parts, fmt.Sprintf("%s=%d", OpKind(k), n))
		}
	}
	return strings.Join(parts, " ")
}

// OpStrings describes ops one a line, as `lvsd plan` and the logs show them.
func OpStrings(ops []Op) []string {
	out := make([]string, len(ops))
	for i, op := range ops {
		out[i] = op.String()
	}
	return out
}
