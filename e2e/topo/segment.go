package topo

import (
	"errors"
	"fmt"
	"net/netip"

	"github.com/vishvananda/netlink"
)

// Segment is a second bridge whose hosts reach the rest of the topology
// only through a router host: they share no L2 with the hosts on the
// topology's own bridge (e.g. real servers in another subnet than the
// director, for tunnel forwarding). One made by AddLAN has no router
// (Router nil): hosts of the topology join it with Plug.
type Segment struct {
	// Bridge is the name of the segment's bridge in the original namespace.
	Bridge string
	// Router is the host that joins the segment to the topology's bridge.
	Router *Host

	tp       *Topology
	bridge   netlink.Link
	gateways []netip.Prefix // the router's addresses on the segment
	plugs    int            // Plug calls, to name their ports
}

// AddSegment creates a bridge, plugs router into it (as "eth1") with the
// gateway addresses (one per family, e.g. 10.0.2.254/24 and fd02::254/64),
// makes router forward, and routes the gateways' prefixes via router from
// every host that exists now on the topology's bridge. Hosts of the
// segment (Segment.AddHost) route everything via the gateways.
func (tp *Topology) AddSegment(router *Host, gateways ...netip.Prefix) (*Segment, error) {
	if router == nil || len(gateways) == 0 {
		return nil, errors.New("a segment needs a router and its addresses")
	}
	s, hosts, err := tp.newSegment(router, gateways)
	if err != nil {
		return nil, err
	}

	port := s.Bridge + "-r"
	if _, err := tp.plug(router, "eth1", port, nil, s.bridge, gateways); err != nil {
		return nil, fmt.Errorf("router %v on %s: %w", router, s.Bridge, err)
	}
	for _, kv := range [][2]string{{"net/ipv4/ip_forward", "1"}, {"net/ipv6/conf/all/forwarding", "1"}} {
		if err := router.Sysctl(kv[0], kv[1]); err != nil {
			return nil, err
		}
	}
	for _, h := range hosts {
		if h == router {
			continue
		}
		for _, gw := range gateways {
			if via := router.Addr(gw.Addr().Is6()); via.IsValid() {
				if err := h.AddRoute(gw.Masked(), via); err != nil {
					return nil, err
				}
			}
		}
	}
	if err := poll(readyDeadline(), router, func() (bool, string) { return router.linkReady(port, "eth1") }); err != nil {
		return nil, err
	}
	return s, nil
}

// AddHost creates a host on the segment, like Topology.AddHost, with a
// default route via the router in each family it has an address of.
func (s *Segment) AddHost(id string, addrs ...netip.Prefix) (*Host, error) {
	h, err := s.tp.addHostOn(id, addrs, s)
	if err == nil {
		err = waitReady(h)
	}
	if err != nil {
		return nil, err
	}
	return h, nil
}
