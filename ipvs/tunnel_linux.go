package ipvs

// Tunnel destinations with GUE or GRE encapsulation, through lvsd's own
// generic netlink: moby/ipvs neither sends nor reads the IPVS_DEST_ATTR_TUN_*
// attributes (its Destination has no field for them, and a SET_DEST without
// them makes the destination IPIP again). Everything else stays with moby.

import (
	"context"
	"encoding/binary"
	"fmt"
	"net/netip"
	"syscall"

	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
)

// Generic netlink numbers of services and destinations
// (include/uapi/linux/ip_vs.h).
const (
	genlCmdNewDest = 5 // IPVS_CMD_NEW_DEST
	genlCmdSetDest = 6 // IPVS_CMD_SET_DEST
	genlCmdGetDest = 8 // IPVS_CMD_GET_DEST (dump)

	genlAttrService = 1 // IPVS_CMD_ATTR_SERVICE, a nest of:
	svcAttrAF       = 1 // u16
	svcAttrProtocol = 2 // u16
	svcAttrAddr     = 3 // 4 or 16 bytes
	svcAttrPort     = 4 // u16, network order
	svcAttrFWMark   = 5 // u32

	genlAttrDest       = 2  // IPVS_CMD_ATTR_DEST, a nest of:
	destAttrAddr       = 1  // 16 bytes on read (an IPv4 address in the first 4)
	destAttrPort       = 2  // u16, network order
	destAttrFwdMethod  = 3  // u32
	destAttrWeight     = 4  // u32
	destAttrUThresh    = 5  // u32
	destAttrLThresh    = 6  // u32
	destAttrAddrFamily = 11 // u16 (Linux 3.18)
	destAttrTunType    = 13 // u8 (Linux 5.2)
	destAttrTunPort    = 14 // u16, network order (5.2)
	destAttrTunFlags   = 15 // u16 (5.3)
)

// writeTunnelDestination adds (cmd NEW_DEST) or updates (SET_DEST) dst of
// svc with its tunnel attributes. A kernel older than the attributes would
// ignore them and make an IPIP destination, so the first write is read back
// (once per Kernel) and refused with ErrNotAvailable if the type did not stick.
func (k *Kernel) writeTunnelDestination(ctx context.Context, cmd uint8, svc ServiceKey, dst Destination) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	c, err := k.genl(ctx)
	if err != nil {
		return err
	}
	defer c.s.Close()
	if _, err := c.exec(cmd, 0, encodeServiceKey(svc), encodeDestination(dst)); err != nil {
		return kernelErr(err)
	}
	if k.tunnelAttrsWork {
		return nil
	}
	got, err := c.tunnels(svc)
	if err != nil {
		return fmt.Errorf("reading the destination back: %w", err)
	}
	if got[dst.DestinationKey] != dst.Tunnel {
		return fmt.Errorf("%w: the kernel made it %s, not %s: IPVS GUE needs Linux 5.2 and GRE 5.3 (IPIP works everywhere)",
			ErrNotAvailable, got[dst.DestinationKey], dst.Tunnel)
	}
	k.tunnelAttrsWork = true
	return nil
}

func (c *genlConn) tunnels(svc ServiceKey) (map[DestinationKey]TunnelOptions, error) {
	msgs, err := c.exec(genlCmdGetDest, unix.NLM_F_DUMP, encodeServiceKey(svc))
	if err != nil {
		return nil, kernelErr(err)
	}
	return parseTunnels(msgs, serviceFamily(svc))
}

// serviceFamily is the address family IPVS keeps the service under.
func serviceFamily(k ServiceKey) uint16 {
	if k.IPv6 || k.Addr.Is6() && !k.Addr.Is4In6() {
		return syscall.AF_INET6
	}
	return syscall.AF_INET
}

// encodeServiceKey builds the IPVS_CMD_ATTR_SERVICE nest that names a
// service: family and mark, or family, protocol, address and port.
func encodeServiceKey(k ServiceKey) *nl.RtAttr {
	n := nl.NewRtAttr(genlAttrService, nil)
	n.AddRtAttr(svcAttrAF, nl.Uint16Attr(serviceFamily(k)))
	if k.FWMark != 0 {
		n.AddRtAttr(svcAttrFWMark, nl.Uint32Attr(k.FWMark))
		return n
	}
	n.AddRtAttr(svcAttrProtocol, nl.Uint16Attr(uint16(k.Protocol)))
	n.AddRtAttr(svcAttrAddr, addrBytes(k.Addr))
	n.AddRtAttr(svcAttrPort, networkUint16(k.Port))
	return n
}

// encodeDestination builds a full IPVS_CMD_ATTR_DEST nest: the kernel wants
// the forwarding method, weight and both thresholds in every NEW and SET.
func encodeDestination(d Destination) *nl.RtAttr {
	n := nl.NewRtAttr(genlAttrDest, nil)
	fam := uint16(syscall.AF_INET)
	if d.Addr.Is6() && !d.Addr.Is4In6() {
		fam = syscall.AF_INET6
	}
	n.AddRtAttr(destAttrAddr, addrBytes(d.Addr))
	n.AddRtAttr(destAttrPort, networkUint16(d.Port))
	n.AddRtAttr(destAttrFwdMethod, nl.Uint32Attr(uint32(d.Forwarding)))
	n.AddRtAttr(destAttrWeight, nl.Uint32Attr(uint32(d.Weight)))
	n.AddRtAttr(destAttrUThresh, nl.Uint32Attr(d.UpperThreshold))
	n.AddRtAttr(destAttrLThresh, nl.Uint32Attr(d.LowerThreshold))
	n.AddRtAttr(destAttrAddrFamily, nl.Uint16Attr(fam))
	n.AddRtAttr(destAttrTunType, nl.Uint8Attr(uint8(d.Tunnel.Type)))
	n.AddRtAttr(destAttrTunPort, networkUint16(d.Tunnel.Port))
	n.AddRtAttr(destAttrTunFlags, nl.Uint16Attr(uint16(d.Tunnel.Flags)))
	return n
}

func addrBytes(a netip.Addr) []byte {
	a = a.Unmap()
	if a.Is4() {
		b := a.As4()
		return b[:]
	}
	b := a.As16()
	return b[:]
}

func networkUint16(v uint16) []byte { return binary.BigEndian.AppendUint16(nil, v) }

// parseTunnels reads GET_DEST replies into each destination's tunnel
// attributes (zero where the kernel sends none).
func parseTunnels(msgs [][]byte, fam uint16) (map[DestinationKey]TunnelOptions, error) {
	dests, err := parseDestinations(msgs, fam)
	if err != nil {
		return nil, err
	}
	out := make(map[DestinationKey]TunnelOptions, len(dests))
	for _, d := range dests {
		out[d.DestinationKey] = d.Tunnel
	}
	return out, nil
}
