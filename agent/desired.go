package agent

import (
	"fmt"
	"net/netip"
	"slices"

	"github.com/lvsd/lvsd/agent/config"
	"github.com/lvsd/lvsd/ipvs"
)

// Desired is the kernel state the configuration asks for.
type Desired struct {
	Services  []VirtualService // sorted by key
	Interface string           // where the VIPs go
	Addresses []netip.Prefix   // VIPs as host prefixes, sorted
}

// VirtualService is one IPVS service lvsd wants, with its destinations in
// canonical order (sorted by address and port). Every director adds them in
// that order so their Maglev tables are identical.
type VirtualService struct {
	ipvs.Service
	Name         string // the configured service it comes from
	Destinations []ipvs.Destination
}

var protocolNumbers = map[string]ipvs.Protocol{"tcp": ipvs.TCP, "udp": ipvs.UDP, "sctp": ipvs.SCTP}

var forwardingMethods = map[config.Forwarding]ipvs.Forwarding{
	config.DR:  ipvs.DirectRoute,
	config.NAT: ipvs.Masquerade,
}

// Build computes the desired state of a director from its configuration.
// It is pure: same input, same output, no host access.
func Build(agent *config.Agent, services []config.Service) (Desired, error) {
	d := Desired{Interface: agent.Interface}
	for _, s := range services {
		vss, err := buildService(s)
		if err != nil {
			return Desired{}, fmt.Errorf("%s:%d: service %q: %w", s.File, s.Line, s.Name, err)
		}
		d.Services = append(d.Services, vss...)
		vip := netip.PrefixFrom(s.VIP, s.VIP.BitLen())
		if !slices.Contains(d.Addresses, vip) {
			d.Addresses = append(d.Addresses, vip)
		}
	}
	slices.SortFunc(d.Services, func(a, b VirtualService) int { return a.ServiceKey.Compare(b.ServiceKey) })
	slices.SortFunc(d.Addresses, func(a, b netip.Prefix) int { return a.Addr().Compare(b.Addr()) })
	return d, nil
}

func buildService(s config.Service) ([]VirtualService, error) {
	fwd, ok := forwardingMethods[s.Forwarding]
	if !ok {
		return nil, fmt.Errorf("forwarding %s is not supported yet", s.Forwarding)
	}
	proto, ok := protocolNumbers[s.Protocol]
	if !ok {
		return nil, fmt.Errorf("protocol %s is not supported yet", s.Protocol)
	}
	if s.AllPorts || slices.ContainsFunc(s.Ports, func(r config.PortRange) bool { return r.From != r.To }) {
		return nil, fmt.Errorf("port ranges and \"all\" are not supported yet")
	}
	var out []VirtualService
	for _, r := range s.Ports {
		vs := VirtualService{
			Service: ipvs.Service{
				ServiceKey: ipvs.ServiceKey{Protocol: proto, Addr: s.VIP, Port: r.From, IPv6: s.VIP.Is6()},
				Scheduler:  s.Scheduler,
				Flags:      schedulerFlags(s),
			},
			Name: s.Name,
		}
		for _, b := range s.Backends {
			port := b.Port
			if port == 0 {
				port = r.From
			}
			vs.Destinations = append(vs.Destinations, ipvs.Destination{
				DestinationKey: ipvs.DestinationKey{Addr: b.Addr, Port: port},
				Weight:         b.Weight,
				Forwarding:     fwd,
			})
		}
		out = append(out, vs)
	}
	return out, nil
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
