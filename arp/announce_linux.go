package arp

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"

	"github.com/mdlayher/arp"
	"github.com/mdlayher/ethernet"
	"github.com/mdlayher/ndp"
	"github.com/mdlayher/packet"
	"golang.org/x/net/bpf"
	"golang.org/x/net/ipv6"
)

// Gratuitous announces addresses with raw packets on the interfaces of the
// current network namespace; it needs CAP_NET_RAW. It keeps one socket per
// interface and family open (a takeover should not wait for sockets to be
// made) and reopens it when sending fails, e.g. after the interface was
// re-created. The zero value is ready; use it through a pointer.
type Gratuitous struct {
	mu    sync.Mutex // guards socks
	socks map[string]*announceSock
}

type announceSock struct {
	ifi *net.Interface
	arp *packet.Conn // IPv4: raw ARP frames, receiving nothing
	ndp *ndp.Conn    // IPv6: ICMPv6 from the link-local address, receiving nothing
}

var _ Announcer = (*Gratuitous)(nil)

// Announce implements Announcer. The address must already be on dev.
func (g *Gratuitous) Announce(ctx context.Context, dev string, addr netip.Addr) error {
	err := g.send(dev, addr)
	if err != nil {
		// Perhaps a stale socket (the interface was re-created): once more
		// with fresh ones.
		g.forget(dev)
		err = g.send(dev, addr)
	}
	if err != nil {
		return fmt.Errorf("announcing %s on %s: %w", addr, dev, err)
	}
	return nil
}

// Close closes every socket.
func (g *Gratuitous) Close() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	var errs []error
	for dev := range g.socks {
		errs = append(errs, g.closeLocked(dev))
	}
	return errors.Join(errs...)
}

func (g *Gratuitous) forget(dev string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	_ = g.closeLocked(dev)
}

func (g *Gratuitous) closeLocked(dev string) error {
	s := g.socks[dev]
	delete(g.socks, dev)
	if s == nil {
		return nil
	}
	var errs []error
	if s.arp != nil {
		errs = append(errs, s.arp.Close())
	}
	if s.ndp != nil {
		errs = append(errs, s.ndp.Close())
	}
	return errors.Join(errs...)
}

func (g *Gratuitous) send(dev string, addr netip.Addr) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.socks == nil {
		g.socks = map[string]*announceSock{}
	}
	s := g.socks[dev]
	if s == nil {
		ifi, err := net.InterfaceByName(dev)
		if err != nil {
			return err
		}
		s = &announceSock{ifi: ifi}
		g.socks[dev] = s
	}
	if addr.Is4() {
		return s.garp(addr)
	}
	return s.unsolicitedNA(addr)
}

// dropAll is a socket filter that accepts no packet: the announcing
// sockets only send, and must not queue every ARP packet of the link.
var dropAll, _ = bpf.Assemble([]bpf.Instruction{bpf.RetConstant{Val: 0}})

// garp broadcasts a gratuitous ARP request and reply for addr (sender and
// target address both addr). Linux updates an existing neighbour entry
// from either, even within its locktime; some other stacks only heed one.
func (s *announceSock) garp(addr netip.Addr) error {
	if s.arp == nil {
		c, err := packet.Listen(s.ifi, packet.Raw, int(ethernet.EtherTypeARP), &packet.Config{Filter: dropAll})
		if err != nil {
			return err
		}
		s.arp = c
	}
	mac := s.ifi.HardwareAddr
	for _, p := range []struct {
		op arp.Operation
		hw net.HardwareAddr
	}{{arp.OperationRequest, net.HardwareAddr{0, 0, 0, 0, 0, 0}}, {arp.OperationReply, mac}} {
		pkt, err := arp.NewPacket(p.op, mac, addr, p.hw, addr)
		if err != nil {
			return err
		}
		body, err := pkt.MarshalBinary()
		if err != nil {
			return err
		}
		frame, err := (&ethernet.Frame{Destination: ethernet.Broadcast, Source: mac, EtherType: ethernet.EtherTypeARP,
			Payload: body}).MarshalBinary()
		if err != nil {
			return err
		}
		if _, err := s.arp.WriteTo(frame, &packet.Addr{HardwareAddr: ethernet.Broadcast}); err != nil {
			return err
		}
	}
	return nil
}

// unsolicitedNA sends a neighbour advertisement for addr to all nodes,
// with the override flag so caches replace the old link-layer address.
// It is sent from the interface's link-local address, or from addr itself
// when there is none yet (a link-local address is tentative right after the
// link came up).
func (s *announceSock) unsolicitedNA(addr netip.Addr) error {
	if s.ndp == nil {
		c, _, err := ndp.Listen(s.ifi, ndp.LinkLocal)
		if err != nil {
			if c, _, err = ndp.Listen(s.ifi, ndp.Addr(addr.String())); err != nil {
				return err
			}
		}
		var f ipv6.ICMPFilter
		f.SetAll(true) // block every type: receive nothing
		_ = c.SetICMPFilter(&f)
		s.ndp = c
	}
	na := &ndp.NeighborAdvertisement{Override: true, TargetAddress: addr,
		Options: []ndp.Option{&ndp.LinkLayerAddress{Direction: ndp.Target, Addr: s.ifi.HardwareAddr}}}
	return s.ndp.WriteTo(na, nil, netip.IPv6LinkLocalAllNodes())
}
