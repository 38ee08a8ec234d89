package planner

import (
	"hash/fnv"
	"net/netip"
	"slices"
	"time"

	"github.com/lvsd/lvsd/agent/config"
	"github.com/lvsd/lvsd/ipvs/l4"
	ipvs "github.com/lvsd/lvsd/ipvs/spec"
	nat "github.com/lvsd/lvsd/nat/rules"
)

// Desired is the host state the configuration asks for: the data plane
// (IPVS, nftables, sysctls, sync daemons), programmed on every director, and
// the VIPs with their addresses, which only the directors holding them put
// on their interface (PlanAddresses).
type Desired struct {
	Services  []*VirtualService // sorted by key; shared between desired states, never modified
	Interface string            // where the addresses moving with the VIPs go
	// VIPDevice is where the VIPs themselves go: Interface, or lo when they
	// are announced over BGP (the routers send the traffic; nobody on the
	// link may answer ARP for a VIP).
	VIPDevice string
	VIPs      []VIPAddresses // sorted by VIP
	// Announce says how the VIPs are announced over BGP; nil without BGP.
	Announce *AnnouncePolicy
	NAT      nat.Ruleset // lvsd's nftables tables: fwmarks, FULLNAT SNAT, sync guard
	// Sysctls are kernel parameters (paths below /proc/sys) and the values
	// they need; lvsd never turns them back: other software may rely on them.
	Sysctls map[string]string
	// Daemons are the kernel's connection-sync daemons (master, backup);
	// none without connection sync.
	Daemons []ipvs.Daemon
	// Timeouts are the IPVS idle timeouts the agent file sets (ipvs.timeouts);
	// a zero field leaves the kernel's value alone, as lvsd does with
	// everything in the namespace it was not asked to change.
	Timeouts ipvs.Timeouts
	// PeerSNAT are, under ECMP, the FULLNAT services' source addresses of
	// every director, by ct mark: which address another director's
	// connection left it with (peerflows.go). nil otherwise.
	PeerSNAT map[uint32]map[string]SNATRange
	// TOA is the TOA program the services with client_address toa need
	// (toa.go); zero: none.
	TOA TOA
}

// VirtualService is one IPVS service lvsd wants, with its destinations in
// canonical order (sorted by address and port). Every director adds them in
// that order so their Maglev tables are identical.
type VirtualService struct {
	ipvs.Service
	Name         string     // the configured service it comes from
	VIP          netip.Addr // the service's VIP (a firewall-mark key has none)
	Destinations []Destination
	// Forwarding and Tunnel are how packets reach every destination of the
	// service, its sorry server's too.
	Forwarding   ipvs.Forwarding
	Tunnel       ipvs.TunnelOptions
	DrainTimeout time.Duration
	// Internal marks a service lvsd needs for itself (the connection-sync
	// pusher), not one of the configuration's.
	Internal bool
	// Sorry is the sorry server as a destination (nil: none). It is not
	// in Destinations as built: health (withWeights) appends it, last,
	// while no backend is eligible.
	Sorry *Destination
}

// Destination is one destination lvsd wants: a configured backend (or the
// sorry server) with the weights health gave it. How packets reach it is
// its service's (VirtualService.Forwarding and Tunnel), and its address,
// connection limits and HealthKey are the backend's as configured, shared
// with the configuration instead of copied: the kernel's counters are no
// part of what is wanted, and VirtualService.Kernel makes the IPVS
// destination. 16 bytes: a director of 10,000 services × 10 backends keeps
// 100,000 of them, 96 bytes each as an ipvs.Destination with a HealthKey
// and a slot weight; with weights of 4 or 8 bytes, 24 (a service's 10 took
// 240 bytes instead of 160).
type Destination struct {
	// From is the backend as configured. Never modified.
	From *config.Backend
	// Weight is the kernel weight: at most config.MaxWeight, which
	// configured weights, overrides and weight headers (health.MaxWeight)
	// are bounded by.
	Weight uint16
	// SlotWeight is the weight a destination wanted at weight 0 is added
	// with before it is lowered: the kernel gives a destination added at
	// weight 0 no Maglev slots, and every director must build the same
	// table whatever health it saw first. At most config.MaxWeight, as
	// Weight.
	SlotWeight uint16
	// Port is the backend's port, or the service's for a backend without
	// one.
	Port uint16
}

// Addr is the destination's address.
func (d Destination) Addr() netip.Addr { return d.From.Addr }

// Key is the destination's key within its service.
func (d Destination) Key() ipvs.DestinationKey {
	return ipvs.DestinationKey{Addr: d.From.Addr, Port: d.Port}
}

// Backend is the HealthKey of dst, one of vs's destinations (SorryKey for
// its sorry server, "" for one of lvsd's own services, which no health,
// override or eligibility names): health and eligibility find their
// destination by it, never by position.
func (vs *VirtualService) Backend(dst Destination) string {
	var buf [80]byte
	return string(vs.appendBackend(buf[:0], dst))
}

// AppendBackend appends vs.Backend(dst) to buf: a reader of many keys
// makes them without a string each.
func (vs *VirtualService) AppendBackend(buf []byte, dst Destination) []byte {
	return vs.appendBackend(buf, dst)
}

// appendBackend appends vs.Backend(dst) to buf: a map indexed by
// string(vs.appendBackend(buf[:0], dst)) allocates nothing.
func (vs *VirtualService) appendBackend(buf []byte, dst Destination) []byte {
	if vs.Internal {
		return buf
	}
	if vs.Sorry != nil && dst.From == vs.Sorry.From {
		return append(append(buf, vs.Name...), sorrySuffix...)
	}
	return config.AppendBackendKey(buf, vs.Name, dst.From.Addr, dst.From.Port)
}

// Kernel is dst as the IPVS destination of vs.
func (vs *VirtualService) Kernel(dst Destination) ipvs.Destination {
	return ipvs.Destination{DestinationKey: dst.Key(), Weight: int(dst.Weight), UpperThreshold: dst.From.UpperThreshold,
		LowerThreshold: dst.From.LowerThreshold, Forwarding: vs.Forwarding, Tunnel: vs.Tunnel}
}

// VIPAddresses is a VIP with every address that moves with it: the VIP,
// FULLNAT source addresses and NAT gateways of its services.
type VIPAddresses struct {
	VIP       netip.Addr
	Addresses []netip.Prefix // sorted, the VIP's own host prefix included
	// Home, under ECMP, makes this no VIP but the FULLNAT source addresses
	// of the director named Home, keyed by the first (VIP): its home holds
	// them while it lives, a survivor when it is lost. They go on the
	// interface, announced by ARP, never by BGP.
	Home string
	// Needs are, for a VIP under ECMP, the keys of this director's own
	// source addresses its FULLNAT services translate to: the VIP is
	// announced only while this director holds them.
	Needs []netip.Addr
	// Interfaces are the interfaces of those Addresses that do not go on
	// Desired.Interface: the VIP of a service with an interface of its
	// own, a NAT gateway on the real servers' side (nat.gateway_interface).
	// nil when every address goes there. Under BGP the VIP is not listed:
	// it goes on VIPDevice.
	Interfaces map[netip.Prefix]string
}

// InterfaceOf returns where p goes: its interface in v, else iface.
func (v VIPAddresses) InterfaceOf(p netip.Prefix, iface string) string {
	if dev, ok := v.Interfaces[p]; ok {
		return dev
	}
	return iface
}

// Devices lists the devices d's addresses go on, sorted: its Interface,
// VIPDevice and every interface a VIP names.
func (d Desired) Devices() []string {
	var out []string
	for _, dev := range []string{d.Interface, d.VIPDevice} {
		if dev != "" {
			out = append(out, dev)
		}
	}
	for _, v := range d.VIPs {
		for _, dev := range v.Interfaces {
			out = append(out, dev)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// ecmpForwarding says why a forwarding method does not work under ECMP.
var ecmpForwarding = map[config.Forwarding]string{
	config.NAT: "the real servers answer through their one gateway, but the routers spread the clients over " +
		"every director; use dr, or a single director with cluster mode active-standby",
}

var protocolNumbers = map[string]l4.Protocol{"tcp": l4.TCP, "udp": l4.UDP, "sctp": l4.SCTP}

var forwardingMethods = map[config.Forwarding]ipvs.Forwarding{
	config.DR:      ipvs.DirectRoute,
	config.NAT:     ipvs.Masquerade,
	config.FullNAT: ipvs.Masquerade, // plus source NAT by nftables
	config.Tunnel:  ipvs.Tunnel,
}

var tunnelTypes = map[config.Encap]ipvs.TunnelType{
	config.EncapIPIP: ipvs.TunnelIPIP, config.EncapGUE: ipvs.TunnelGUE, config.EncapGRE: ipvs.TunnelGRE,
}

var tunnelFlags = map[config.TunnelChecksum]ipvs.TunnelFlags{config.ChecksumOuter: ipvs.TunnelChecksum}

// tunnelOptions are the IPVS tunnel attributes of a tunnel service's
// destinations; zero (IPIP, or no tunnel) otherwise.
func tunnelOptions(s *config.Service) ipvs.TunnelOptions {
	if s.Forwarding != config.Tunnel {
		return ipvs.TunnelOptions{}
	}
	return ipvs.TunnelOptions{Type: tunnelTypes[s.Tunnel.Encap], Port: s.Tunnel.Port, Flags: tunnelFlags[s.Tunnel.Checksum]}
}

// Addresses lists every address of vips, sorted and without repeats (an
// address can move with several VIPs).
func Addresses(vips []VIPAddresses) []netip.Prefix {
	var out []netip.Prefix
	for _, v := range vips {
		out = append(out, v.Addresses...)
	}
	slices.SortFunc(out, func(a, b netip.Prefix) int { return a.Addr().Compare(b.Addr()) })
	return slices.Compact(out)
}

// FirewallMark is the packet mark (and FULLNAT conntrack mark) of a service.
// It derives from the name alone, so it is stable across reloads and the
// same on every director, which connection sync needs.
func FirewallMark(service string) uint32 {
	h := fnv.New32a()
	h.Write([]byte(service))
	return 0x10000000 | h.Sum32()&0x0fffffff
}

// needsFirewallMark reports whether the kernel cannot match the service by
// address, protocol and one port: port ranges, all ports, any protocol and
// source-range steering all need nftables to mark its packets.
func needsFirewallMark(s *config.Service) bool {
	return s.AllPorts || s.Protocol == "any" || len(s.SourceRanges) > 0 ||
		slices.ContainsFunc(s.Ports, func(r l4.PortRange) bool { return r.From != r.To })
}

func buildService(s *config.Service, mark uint32, snat []netip.Addr) ([]*VirtualService, nat.Spec) {
	base := ipvs.Service{
		Scheduler: s.Scheduler,
		Flags:     schedulerFlags(s),
	}
	if s.Persistence.Timeout > 0 {
		base.Flags |= ipvs.FlagPersistent
		base.Timeout = uint32(s.Persistence.Timeout.Seconds())
		base.Netmask = s.Persistence.Netmask
	}
	match := nat.Match{VIP: s.VIP, Protocol: l4.Protocol(protocolNumbers[s.Protocol]), Sources: s.SourceRanges}
	if !s.AllPorts {
		for _, r := range s.Ports {
			match.Ports = append(match.Ports, l4.PortRange{From: r.From, To: r.To})
		}
	}
	var spec nat.Spec
	if s.Forwarding == config.FullNAT {
		spec.SNAT = append(spec.SNAT, nat.SNATRule{Match: match, CtMark: mark, To: snat, Comment: s.Name})
	}
	if needsFirewallMark(s) {
		spec.Marks = append(spec.Marks, nat.MarkRule{Match: match, Mark: mark, Comment: s.Name})
		vs := &VirtualService{Service: base, Name: s.Name, VIP: s.VIP, DrainTimeout: s.DrainTimeout,
			Forwarding: forwardingMethods[s.Forwarding], Tunnel: tunnelOptions(s)}
		vs.ServiceKey = ipvs.ServiceKey{FWMark: mark, IPv6: s.VIP.Is6()}
		vs.Destinations, vs.Sorry = destinations(s, 0) // port 0: keep the client's destination port
		return []*VirtualService{vs}, spec
	}
	var out []*VirtualService
	for _, r := range s.Ports {
		vs := &VirtualService{Service: base, Name: s.Name, VIP: s.VIP, DrainTimeout: s.DrainTimeout,
			Forwarding: forwardingMethods[s.Forwarding], Tunnel: tunnelOptions(s)}
		vs.ServiceKey = ipvs.ServiceKey{Protocol: protocolNumbers[s.Protocol], Addr: s.VIP, Port: r.From, IPv6: s.VIP.Is6()}
		vs.Destinations, vs.Sorry = destinations(s, r.From)
		out = append(out, vs)
	}
	return out, spec
}

// destinations lists the backends as IPVS destinations, in the order of
// s.Backends (the configuration sorts them), and the sorry server (nil:
// none); one without a port of its own gets servicePort.
func destinations(s *config.Service, servicePort uint16) ([]Destination, *Destination) {
	port := func(p uint16) uint16 {
		if p == 0 {
			return servicePort
		}
		return p
	}
	out := make([]Destination, 0, len(s.Backends))
	for i := range s.Backends {
		b := &s.Backends[i]
		out = append(out, Destination{From: b, Port: port(b.Port), Weight: uint16(b.Weight), SlotWeight: uint16(max(b.Weight, 1))})
	}
	if !s.SorryServer.IsValid() {
		return out, nil
	}
	sorry := &config.Backend{Addr: s.SorryServer.Addr(), Port: s.SorryServer.Port(), Weight: 1}
	return out, &Destination{From: sorry, Port: port(sorry.Port), Weight: 1, SlotWeight: 1}
}

// isSorry reports whether k is the service's sorry server.
func (vs VirtualService) IsSorry(k ipvs.DestinationKey) bool {
	return vs.Sorry != nil && vs.Sorry.Key() == k
}

// SorryKey names a service's sorry server where destinations name their
// backend (Destination.Backend); it is no HealthKey, so health never
// finds it.
func SorryKey(service string) string { return service + sorrySuffix }

const sorrySuffix = "/sorry"

// schedulerFlags maps affinity to Maglev flags. mh-fallback is always on so a
// destination set to weight 0 hands its flows to the others instead of
// dropping them; mh-port makes the source port part of the hash, which is
// the 5-tuple affinity (the service already fixes address, port and protocol).
func schedulerFlags(s *config.Service) ipvs.Flags {
	if s.Scheduler != "mh" {
		return 0
	}
	f := ipvs.FlagMHFallback
	if s.Affinity == config.AffinityNone || s.Affinity == config.AffinityClientIPPortProto {
		f |= ipvs.FlagMHPort
	}
	return f
}
