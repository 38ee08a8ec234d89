package vrrp

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"

	"golang.org/x/net/ipv4"
	"golang.org/x/net/ipv6"
)

// maxPacket holds the longest advertisement (255 IPv6 addresses) with its
// IPv4 header; a longer datagram arrives truncated and fails the length
// check.
const maxPacket = headerLen + 255*16 + 60

// ipv4Conn is raw IP protocol 112 on one interface, IPv4.
type ipv4Conn struct {
	raw     *ipv4.RawConn
	ifindex int
	primary netip.Addr
	buf     []byte
}

// ListenV4 opens VRRP over IPv4 on the interface ifname: it joins
// 224.0.0.18 there and sends from the interface's first IPv4 address that
// skip does not exclude (the VIPs, which move).
func ListenV4(ifname string, skip func(netip.Addr) bool) (Conn, error) {
	ifi, err := net.InterfaceByName(ifname)
	if err != nil {
		return nil, fmt.Errorf("vrrp: %w", err)
	}
	primary, err := primaryAddress(ifi, skip, false)
	if err != nil {
		return nil, err
	}
	c, err := net.ListenPacket(fmt.Sprintf("ip4:%d", Protocol), "0.0.0.0")
	if err != nil {
		return nil, fmt.Errorf("vrrp: opening a raw IPv4 socket (needs CAP_NET_RAW): %w", err)
	}
	raw, err := ipv4.NewRawConn(c)
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("vrrp: %w", err)
	}
	err = errors.Join(
		raw.JoinGroup(ifi, &net.IPAddr{IP: GroupV4.AsSlice()}),
		raw.SetMulticastInterface(ifi),
		raw.SetMulticastTTL(TTL),
		raw.SetMulticastLoopback(false),
		raw.SetControlMessage(ipv4.FlagInterface, true))
	if err != nil {
		raw.Close()
		return nil, fmt.Errorf("vrrp: setting up the IPv4 socket on %s: %w", ifname, err)
	}
	return &ipv4Conn{raw: raw, ifindex: ifi.Index, primary: primary, buf: make([]byte, maxPacket)}, nil
}

func (c *ipv4Conn) Primary() netip.Addr { return c.primary }

func (c *ipv4Conn) Send(b []byte) error {
	h := &ipv4.Header{Version: ipv4.Version, Len: ipv4.HeaderLen, TOS: 0xc0, // internetwork control, as keepalived
		TotalLen: ipv4.HeaderLen + len(b), TTL: TTL, Protocol: Protocol,
		Src: c.primary.AsSlice(), Dst: GroupV4.AsSlice()}
	return c.raw.WriteTo(h, b, nil)
}

func (c *ipv4Conn) Read() (Packet, error) {
	for {
		h, p, cm, err := c.raw.ReadFrom(c.buf)
		if errors.Is(err, net.ErrClosed) {
			return Packet{}, ErrClosed
		}
		if err != nil {
			return Packet{}, fmt.Errorf("malformed IPv4 packet: %w", err)
		}
		if cm != nil && cm.IfIndex != c.ifindex {
			continue // the group joined on another interface
		}
		src, _ := netip.AddrFromSlice(h.Src.To4())
		dst, _ := netip.AddrFromSlice(h.Dst.To4())
		return Packet{Src: src, Dst: dst, TTL: h.TTL, Data: p}, nil
	}
}

func (c *ipv4Conn) Close() error { return c.raw.Close() }

// ipv6Conn is raw IP protocol 112 on one interface, IPv6.
type ipv6Conn struct {
	pc      *ipv6.PacketConn
	ifi     *net.Interface
	primary netip.Addr
	buf     []byte
}

// ListenV6 opens VRRP over IPv6 on the interface ifname: it joins ff02::12
// there and sends from the interface's link-local address, as RFC 5798
// requires.
func ListenV6(ifname string) (Conn, error) {
	ifi, err := net.InterfaceByName(ifname)
	if err != nil {
		return nil, fmt.Errorf("vrrp: %w", err)
	}
	primary, err := primaryAddress(ifi, nil, true)
	if err != nil {
		return nil, err
	}
	c, err := net.ListenPacket(fmt.Sprintf("ip6:%d", Protocol), "::")
	if err != nil {
		return nil, fmt.Errorf("vrrp: opening a raw IPv6 socket (needs CAP_NET_RAW): %w", err)
	}
	pc := ipv6.NewPacketConn(c)
	err = errors.Join(
		pc.JoinGroup(ifi, &net.IPAddr{IP: GroupV6.AsSlice()}),
		pc.SetMulticastInterface(ifi),
		pc.SetMulticastHopLimit(TTL),
		pc.SetMulticastLoopback(false),
		pc.SetControlMessage(ipv6.FlagInterface|ipv6.FlagHopLimit|ipv6.FlagDst, true))
	if err != nil {
		pc.Close()
		return nil, fmt.Errorf("vrrp: setting up the IPv6 socket on %s: %w", ifname, err)
	}
	return &ipv6Conn{pc: pc, ifi: ifi, primary: primary, buf: make([]byte, maxPacket)}, nil
}

func (c *ipv6Conn) Primary() netip.Addr { return c.primary }

func (c *ipv6Conn) Send(b []byte) error {
	cm := &ipv6.ControlMessage{HopLimit: TTL, Src: c.primary.AsSlice(), IfIndex: c.ifi.Index}
	_, err := c.pc.WriteTo(b, cm, &net.IPAddr{IP: GroupV6.AsSlice(), Zone: c.ifi.Name})
	return err
}

func (c *ipv6Conn) Read() (Packet, error) {
	for {
		n, cm, from, err := c.pc.ReadFrom(c.buf)
		if errors.Is(err, net.ErrClosed) {
			return Packet{}, ErrClosed
		}
		if err != nil {
			return Packet{}, fmt.Errorf("receiving: %w", err)
		}
		if cm == nil || cm.IfIndex != c.ifi.Index {
			continue
		}
		ipa, _ := from.(*net.IPAddr)
		if ipa == nil {
			continue
		}
		src, _ := netip.AddrFromSlice(ipa.IP.To16())
		dst, _ := netip.AddrFromSlice(cm.Dst.To16())
		return Packet{Src: src, Dst: dst, TTL: cm.HopLimit, Data: c.buf[:n]}, nil
	}
}

func (c *ipv6Conn) Close() error { return c.pc.Close() }

// primaryAddress is ifi's first IPv4 address not skipped, or with v6 its
// link-local address.
func primaryAddress(ifi *net.Interface, skip func(netip.Addr) bool, v6 bool) (netip.Addr, error) {
	addrs, err := ifi.Addrs()
	if err != nil {
		return netip.Addr{}, fmt.Errorf("vrrp: addresses of %s: %w", ifi.Name, err)
	}
	for _, a := range addrs {
		n, ok := a.(*net.IPNet)
		if !ok {
			continue
		}
		ip, _ := netip.AddrFromSlice(n.IP)
		ip = ip.Unmap()
		switch {
		case v6 && ip.Is6() && ip.IsLinkLocalUnicast():
			return ip, nil
		case !v6 && ip.Is4() && (skip == nil || !skip(ip)):
			return ip, nil
		}
	}
	family := "IPv4 address of its own"
	if v6 {
		family = "IPv6 link-local address"
	}
	return netip.Addr{}, fmt.Errorf("vrrp: %s has no %s to send advertisements from", ifi.Name, family)
}

// Listen opens VRRP on ifname (IPv6 with v6, else IPv4 sending from an
// address isVIP does not claim) and starts a router there until ctx ends
// or its Stop.
func Listen(ctx context.Context, ifname string, v6 bool, isVIP func(netip.Addr) bool, cfg Config) (*Router, error) {
	var conn Conn
	var err error
	if v6 {
		conn, err = ListenV6(ifname)
	} else {
		conn, err = ListenV4(ifname, isVIP)
	}
	if err != nil {
		return nil, err
	}
	r, err := Start(ctx, cfg, conn)
	if err != nil {
		conn.Close()
	}
	return r, err
}
