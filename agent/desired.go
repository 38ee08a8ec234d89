package agent

import (
	"fmt"
	"hash/fnv"
	"net/netip"
	"slices"
	"time"

	"github.com/lvsd/lvsd/agent/config"
	"github.com/lvsd/lvsd/ipvs"
	"github.com/lvsd/lvsd/nat"
)

// Desired is the kernel state the configuration asks for.
type Desired struct {
	Services  []VirtualService // sorted by key
	Interface string           // where the VIPs go
	Addresses []netip.Prefix   // VIPs as host prefixes, sorted
	NAT       nat.Ruleset      // lvsd's nftables tables: fwmarks and FULLNAT SNAT
	// Sysctls the director needs: forwarding for NAT and FULLNAT, IPVS
	// conntrack for FULLNAT (nftables NAT works on conntrack entries).
	ForwardV4, ForwardV6, IPVSConntrack bool
	// ExpireConnections: any service at all needs connections of deleted
	// destinations reset rather than hung, and persistence templates that
	// follow weight 0 (ipvs.EnableConnectionExpiry).
	ExpireConnections bool
}

// VirtualService is one IPVS service lvsd wants, with its destinations in
// canonical order (sorted by address and port). Every director adds them in
// that order so their Maglev tables are identical.
type VirtualService struct {
	ipvs.Service
	Name         string     // the configured service it comes from
	VIP          netip.Addr // the service's VIP (a firewall-mark key has none)
	Destinations []ipvs.Destination
	// SlotWeights, aligned with Destinations, are the weights a destination
	// is added with before its weight is lowered to 0: the kernel gives a
	// destination added at weight 0 no Maglev slots, and every director
	// must build the same table whatever health it saw first.
	SlotWeights  []int
	DrainTimeout time.Duration
}

var protocolNumbers = map[string]ipvs.Protocol{"tcp": ipvs.TCP, "udp": ipvs.UDP, "sctp": ipvs.SCTP}

var forwardingMethods = map[config.Forwarding]ipvs.Forwarding{
	config.DR:      ipvs.DirectRoute,
	config.NAT:     ipvs.Masquerade,
	config.FullNAT: ipvs.Masquerade, // plus source NAT by nftables
}

// Build computes the desired state of a director from its configuration.
// It is pure: same input, same output, no host access.
func Build(agent *config.Agent, services []config.Service) (Desired, error) {
	d := Desired{Interface: agent.Interface}
	var spec nat.Spec
	marks := map[uint32]string{}
	for _, s := range services {
		mark := FirewallMark(s.Name)
		if other, ok := marks[mark]; ok {
			return Desired{}, fmt.Errorf("%s:%d: services %q and %q get the same firewall mark %#x; rename one", s.File, s.Line, other, s.Name, mark)
		}
		marks[mark] = s.Name
		vss, rules := buildService(s, mark)
		d.Services = append(d.Services, vss...)
		spec.Marks = append(spec.Marks, rules.Marks...)
		spec.SNAT = append(spec.SNAT, rules.SNAT...)
		for _, a := range s.Addresses() {
			if p := netip.PrefixFrom(a, a.BitLen()); !slices.Contains(d.Addresses, p) {
				d.Addresses = append(d.Addresses, p)
			}
		}
		if s.Forwarding != config.DR {
			d.ForwardV4 = d.ForwardV4 || s.VIP.Is4()
			d.ForwardV6 = d.ForwardV6 || s.VIP.Is6()
		}
		d.IPVSConntrack = d.IPVSConntrack || s.Forwarding == config.FullNAT
	}
	spec.DropRedirects6 = d.ForwardV6
	d.ExpireConnections = len(services) > 0
	if c := agent.Cluster; c != nil && c.ConnSync.Enabled {
		spec.SyncPorts = []uint16{c.ConnSync.Port, c.ConnSync.Port + 1}
	}
	var err error
	if d.NAT, err = nat.Render(spec); err != nil {
		return Desired{}, fmt.Errorf("rendering nftables rules: %w", err)
	}
	slices.SortFunc(d.Services, func(a, b VirtualService) int { return a.ServiceKey.Compare(b.ServiceKey) })
	slices.SortFunc(d.Addresses, func(a, b netip.Prefix) int { return a.Addr().Compare(b.Addr()) })
	return d, nil
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
func needsFirewallMark(s config.Service) bool {
	return s.AllPorts || s.Protocol == "any" || len(s.SourceRanges) > 0 ||
		slices.ContainsFunc(s.Ports, func(r config.PortRange) bool { return r.From != r.To })
}

func buildService(s config.Service, mark uint32) ([]VirtualService, nat.Spec) {
	base := ipvs.Service{
		Scheduler: s.Scheduler,
		Flags:     schedulerFlags(s),
	}
	if s.Persistence.Timeout > 0 {
		base.Flags |= ipvs.FlagPersistent
		base.Timeout = uint32(s.Persistence.Timeout.Seconds())
		base.Netmask = s.Persistence.Netmask
	}
	match := nat.Match{VIP: s.VIP, Protocol: nat.Protocol(protocolNumbers[s.Protocol]), Sources: s.SourceRanges}
	if !s.AllPorts {
		for _, r := range s.Ports {
			match.Ports = append(match.Ports, nat.PortRange{From: r.From, To: r.To})
		}
	}
	var spec nat.Spec
	if s.Forwarding == config.FullNAT {
		spec.SNAT = append(spec.SNAT, nat.SNATRule{Match: match, CtMark: mark, To: s.SNATAddresses, Comment: s.Name})
	}
	if needsFirewallMark(s) {
		spec.Marks = append(spec.Marks, nat.MarkRule{Match: match, Mark: mark, Comment: s.Name})
		vs := VirtualService{Service: base, Name: s.Name, VIP: s.VIP, DrainTimeout: s.DrainTimeout}
		vs.ServiceKey = ipvs.ServiceKey{FWMark: mark, IPv6: s.VIP.Is6()}
		vs.Destinations, vs.SlotWeights = destinations(s, 0) // port 0: keep the client's destination port
		return []VirtualService{vs}, spec
	}
	var out []VirtualService
	for _, r := range s.Ports {
		vs := VirtualService{Service: base, Name: s.Name, VIP: s.VIP, DrainTimeout: s.DrainTimeout}
		vs.ServiceKey = ipvs.ServiceKey{Protocol: protocolNumbers[s.Protocol], Addr: s.VIP, Port: r.From, IPv6: s.VIP.Is6()}
		vs.Destinations, vs.SlotWeights = destinations(s, r.From)
		out = append(out, vs)
	}
	return out, spec
}

// destinations lists the backends as IPVS destinations, in the order of
// s.Backends; a backend without a port of its own gets servicePort.
func destinations(s config.Service, servicePort uint16) ([]ipvs.Destination, []int) {
	out := make([]ipvs.Destination, 0, len(s.Backends))
	slots := make([]int, 0, len(s.Backends))
	for _, b := range s.Backends {
		slots = append(slots, max(b.Weight, 1))
		port := b.Port
		if port == 0 {
			port = servicePort
		}
		out = append(out, ipvs.Destination{
			DestinationKey: ipvs.DestinationKey{Addr: b.Addr, Port: port},
			Weight:         b.Weight,
			Forwarding:     forwardingMethods[s.Forwarding],
		})
	}
	return out, slots
}

// schedulerFlags maps affinity to Maglev flags. mh-fallback is always on so a
// destination set to weight 0 hands its flows to the others instead of
// dropping them; mh-port makes the source port part of the hash, which is
// the 5-tuple affinity (the service already fixes address, port and protocol).
func schedulerFlags(s config.Service) ipvs.Flags {
	if s.Scheduler != "mh" {
		return 0
	}
	f := ipvs.FlagMHFallback
	if s.Affinity == config.AffinityNone || s.Affinity == config.AffinityClientIPPortProto {
		f |= ipvs.FlagMHPort
	}
	return f
}
