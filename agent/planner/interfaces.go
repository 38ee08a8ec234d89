package planner

import (
	"cmp"
	"fmt"
	"net/netip"

	"github.com/lvsd/lvsd/agent/config"
)

// placements are the interfaces the services put their addresses on,
// with the first service that put each there: an address is on one
// interface, so two services that disagree are refused.
type placements map[netip.Prefix]placement

type placement struct {
	dev string
	by  *config.Service
}

// add places p's addresses: the VIP and its FULLNAT source addresses on
// the service's interface, its NAT gateway on nat.gateway_interface; under
// BGP the VIP goes on lo whatever the service says, and is not placed.
func (pl placements) add(agent *config.Agent, p *piece) error {
	s := p.src
	iface := cmp.Or(s.Interface, agent.Interface)
	for _, a := range p.addrs {
		dev := iface
		switch {
		case a.Addr() == s.VIP && agent.BGP != nil:
			continue
		case s.Gateway.IsValid() && a.Addr() == s.Gateway:
			dev = cmp.Or(s.GatewayInterface, iface)
		}
		if prev, ok := pl[a]; ok && prev.dev != dev {
			return fmt.Errorf("%s:%d: service %q puts %s on %s, service %q (%s:%d) on %s: an address goes on one interface; "+
				"every service of a VIP must name the same interface, and a shared gateway the same gateway_interface",
				s.File, s.Line, s.Name, a.Addr(), dev, prev.by.Name, prev.by.File, prev.by.Line, prev.dev)
		}
		if _, ok := pl[a]; !ok {
			pl[a] = placement{dev, s}
		}
	}
	return nil
}

// elsewhere returns the interfaces of those of addrs not placed on iface
// (VIPAddresses.Interfaces); nil when all are.
func (pl placements) elsewhere(addrs []netip.Prefix, iface string) map[netip.Prefix]string {
	var out map[netip.Prefix]string
	for _, a := range addrs {
		if at, ok := pl[a]; ok && at.dev != iface {
			if out == nil {
				out = map[netip.Prefix]string{}
			}
			out[a] = at.dev
		}
	}
	return out
}
