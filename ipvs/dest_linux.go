package ipvs

// Every destination request goes through lvsd's own generic netlink: each
// write through writeDest, with the full entry and the tunnel attributes,
// and each read through destinations, with the tunnel attributes and the
// counters in one dump per service. moby/ipvs can do neither: its NEW_DEST
// and SET_DEST carry no IPVS_DEST_ATTR_TUN_* (the kernel reads their
// absence as IPIP, so a weight change through it would turn a GUE
// destination into IPIP), and its reads have neither the tunnel attributes
// nor the 64-bit counters (IPVS_DEST_ATTR_STATS64, Linux 4.1; its 32-bit
// ones wrap after 4 G packets).

import (
	"context"
	"encoding/binary"
	"fmt"
	"net/netip"
	"syscall"
	"time"

	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
)

// Generic netlink numbers of services and destinations
// (include/uapi/linux/ip_vs.h).
const (
	genlCmdNewDest = 5 // IPVS_CMD_NEW_DEST
	genlCmdSetDest = 6 // IPVS_CMD_SET_DEST
	genlCmdDelDest = 7 // IPVS_CMD_DEL_DEST
	genlCmdGetDest = 8 // IPVS_CMD_GET_DEST (dump)

	genlAttrService = 1 // IPVS_CMD_ATTR_SERVICE, a nest of:
	svcAttrAF       = 1 // u16
	svcAttrProtocol = 2 // u16
	svcAttrAddr     = 3 // 4 or 16 bytes
	svcAttrPort     = 4 // u16, network order
	svcAttrFWMark   = 5 // u32

	genlAttrDest         = 2  // IPVS_CMD_ATTR_DEST, a nest of:
	destAttrAddr         = 1  // 16 bytes on read (an IPv4 address in the first 4)
	destAttrPort         = 2  // u16, network order
	destAttrFwdMethod    = 3  // u32
	destAttrWeight       = 4  // u32
	destAttrUThresh      = 5  // u32
	destAttrLThresh      = 6  // u32
	destAttrActiveConns  = 7  // u32, read only
	destAttrInactConns   = 8  // u32, read only
	destAttrPersistConns = 9  // u32, read only
	destAttrStats        = 10 // nest of 32-bit counters (rates 32-bit too), read only
	destAttrAddrFamily   = 11 // u16 (Linux 3.18)
	destAttrStats64      = 12 // nest of 64-bit counters (Linux 4.1), read only
	destAttrTunType      = 13 // u8 (Linux 5.2)
	destAttrTunPort      = 14 // u16, network order (5.2)
	destAttrTunFlags     = 15 // u16 (5.3)

	statsAttrConns    = 1
	statsAttrInPkts   = 2
	statsAttrOutPkts  = 3
	statsAttrInBytes  = 4 // u64 in both nests
	statsAttrOutBytes = 5 // u64 in both nests
	statsAttrCPS      = 6
	statsAttrInPPS    = 7
	statsAttrOutPPS   = 8
	statsAttrInBPS    = 9
	statsAttrOutBPS   = 10
)

// writeDest adds (cmd NEW_DEST), updates (SET_DEST) or deletes (DEL_DEST)
// dst of svc on a free writer. It is the only destination writer, so every
// write carries the tunnel attributes: the kernel resets what a request
// leaves out, and a SET_DEST without them would make a GUE or GRE
// destination IPIP.
func (k *Kernel) writeDest(ctx context.Context, cmd uint8, svc ServiceKey, dst Destination) error {
	w := <-k.writers
	defer func() { k.writers <- w }()
	c, err := w.destConn(ctx, k)
	if err != nil {
		return err
	}
	if _, err := c.exec(cmd, 0, destWrite(svc, dst)...); err != nil {
		if !kernelAnswered(err) { // the answer may still come, on a socket no longer waiting for it
			w.closeDest()
		}
		return kernelErr(err)
	}
	if cmd == genlCmdDelDest {
		return nil
	}
	if err := k.checkTunnelAttrs(c, svc, dst); err != nil {
		w.closeDest() // a dump cut short may have left replies in it
		return err
	}
	return nil
}

// destWrite is the attributes of a destination write as the kernel wants
// them: the service's key, then the destination's full entry
// (ip_vs_genl_parse_dest: every NEW and SET needs the forwarding method,
// weight and both thresholds) with its address family and tunnel
// attributes. DEL_DEST reads only the address, port and family, and gets
// the rest zero.
func destWrite(svc ServiceKey, dst Destination) []nl.NetlinkRequestData {
	return []nl.NetlinkRequestData{encodeServiceKey(svc), encodeDestination(dst)}
}

// encodeDestination builds the IPVS_CMD_ATTR_DEST nest of a write. The
// tunnel attributes are always there, zero (IPIP, or none) unless dst
// forwards through a tunnel, as the read side takes them: a kernel before
// 5.2 ignores them, one since keeps what it is sent.
func encodeDestination(d Destination) *nl.RtAttr {
	n := nl.NewRtAttr(genlAttrDest, nil)
	fam := uint16(syscall.AF_INET)
	if d.Addr.Is6() && !d.Addr.Is4In6() {
		fam = syscall.AF_INET6
	}
	var tun TunnelOptions
	if d.Forwarding == Tunnel {
		tun = d.Tunnel
	}
	n.AddRtAttr(destAttrAddr, addrBytes(d.Addr))
	n.AddRtAttr(destAttrPort, networkUint16(d.Port))
	n.AddRtAttr(destAttrFwdMethod, nl.Uint32Attr(uint32(d.Forwarding)))
	n.AddRtAttr(destAttrWeight, nl.Uint32Attr(uint32(d.Weight)))
	n.AddRtAttr(destAttrUThresh, nl.Uint32Attr(d.UpperThreshold))
	n.AddRtAttr(destAttrLThresh, nl.Uint32Attr(d.LowerThreshold))
	n.AddRtAttr(destAttrAddrFamily, nl.Uint16Attr(fam))
	n.AddRtAttr(destAttrTunType, nl.Uint8Attr(uint8(tun.Type)))
	n.AddRtAttr(destAttrTunPort, networkUint16(tun.Port))
	n.AddRtAttr(destAttrTunFlags, nl.Uint16Attr(uint16(tun.Flags)))
	return n
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

// serviceFamily is the address family IPVS keeps the service under.
func serviceFamily(k ServiceKey) uint16 {
	if k.IPv6 || k.Addr.Is6() && !k.Addr.Is4In6() {
		return syscall.AF_INET6
	}
	return syscall.AF_INET
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

// destConn returns the writer's destination socket, opening it the first
// time or after a failure; its timeouts follow ctx.
func (w *writer) destConn(ctx context.Context, k *Kernel) (*genlConn, error) {
	if w.dest == nil {
		c, err := k.genl(ctx)
		if err != nil {
			return nil, err
		}
		w.dest = c
	}
	return w.dest, w.dest.bound(ctx)
}

func (w *writer) closeDest() {
	if w.dest != nil {
		w.dest.s.Close()
		w.dest = nil
	}
}

// bound makes the socket's send and receive timeouts ctx's deadline, or
// genlTimeout if that is sooner, so a lost answer fails instead of
// hanging the caller.
func (c *genlConn) bound(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	timeout := genlTimeout
	if dl, ok := ctx.Deadline(); ok {
		timeout = max(min(timeout, time.Until(dl)), time.Millisecond)
	}
	tv := unix.NsecToTimeval(timeout.Nanoseconds())
	_ = c.s.SetSendTimeout(&tv) // both only store the value
	_ = c.s.SetReceiveTimeout(&tv)
	return nil
}

// dumpConn returns the socket kept for reads, opening it the first time
// or after a failure; k.mu must be held. Its timeouts follow ctx.
func (k *Kernel) dumpConn(ctx context.Context) (*genlConn, error) {
	if k.dump == nil {
		c, err := k.genl(ctx)
		if err != nil {
			return nil, err
		}
		k.dump = c
	}
	return k.dump, k.dump.bound(ctx)
}

// kernelAnswered says err is the kernel's answer to a request (an errno in
// its NLMSG_ERROR or NLMSG_DONE), not a failure to send or to hear one.
func kernelAnswered(err error) bool {
	_, ok := err.(syscall.Errno)
	return ok
}

// closeDump drops the kept socket after a failure that may have left
// replies in it (a timeout in the middle of a dump); k.mu must be held.
func (k *Kernel) closeDump() {
	if k.dump != nil {
		k.dump.s.Close()
		k.dump = nil
	}
}

// Destinations implements Interface.
func (k *Kernel) Destinations(ctx context.Context, svc ServiceKey) ([]Destination, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	c, err := k.dumpConn(ctx)
	if err != nil {
		return nil, fmt.Errorf("listing destinations of %s: %w", svc, err)
	}
	out, err := c.destinations(svc)
	if err != nil {
		if !kernelAnswered(err) { // the socket may hold a half dump
			k.closeDump()
		}
		return nil, fmt.Errorf("listing destinations of %s: %w", svc, kernelErr(err))
	}
	return out, nil
}

// destinations is the only destination reader: one GET_DEST dump of svc,
// each destination with its tunnel attributes and counters.
func (c *genlConn) destinations(svc ServiceKey) ([]Destination, error) {
	msgs, err := c.exec(genlCmdGetDest, unix.NLM_F_DUMP, encodeServiceKey(svc))
	if err != nil {
		return nil, err
	}
	return parseDestinations(msgs, serviceFamily(svc))
}

// destAttrSize is the smallest payload of the fixed-size attributes read.
var destAttrSize = map[uint16]int{destAttrAddr: 4, destAttrPort: 2, destAttrFwdMethod: 4, destAttrWeight: 4,
	destAttrUThresh: 4, destAttrLThresh: 4, destAttrActiveConns: 4, destAttrInactConns: 4, destAttrPersistConns: 4,
	destAttrAddrFamily: 2, destAttrTunType: 1, destAttrTunPort: 2, destAttrTunFlags: 2}

// parseDestinations reads GET_DEST replies, one message per destination,
// in the kernel's list order. fam is the service's family, which a kernel
// before 3.18 gives its destinations without saying so.
func parseDestinations(msgs [][]byte, fam uint16) ([]Destination, error) {
	nests, err := genlNests(msgs, genlAttrDest)
	if err != nil {
		return nil, fmt.Errorf("parsing destination reply: %w", err)
	}
	out := make([]Destination, 0, len(nests))
	for _, n := range nests {
		d, err := parseDestination(n, fam)
		if err != nil {
			return nil, err
		}
		out = append(out, d)
	}
	return out, nil
}

func parseDestination(b []byte, fam uint16) (Destination, error) {
	attrs, err := nl.ParseRouteAttr(b)
	if err != nil {
		return Destination{}, fmt.Errorf("parsing destination attributes: %w", err)
	}
	var (
		d              Destination
		raw            []byte
		ne             = nl.NativeEndian()
		stats, stats64 []byte
	)
	for _, a := range attrs {
		typ, v := a.Attr.Type&nlaTypeMask, a.Value
		if size := destAttrSize[typ]; len(v) < size {
			return Destination{}, fmt.Errorf("destination attribute %d has %d bytes, want %d", typ, len(v), size)
		}
		switch typ {
		case destAttrAddr:
			raw = v
		case destAttrPort:
			d.Port = binary.BigEndian.Uint16(v)
		case destAttrFwdMethod:
			d.Forwarding = Forwarding(ne.Uint32(v) & 0x7)
		case destAttrWeight:
			d.Weight = int(int32(ne.Uint32(v)))
		case destAttrUThresh:
			d.UpperThreshold = ne.Uint32(v)
		case destAttrLThresh:
			d.LowerThreshold = ne.Uint32(v)
		case destAttrActiveConns:
			d.ActiveConns = ne.Uint32(v)
		case destAttrInactConns:
			d.InactiveConns = ne.Uint32(v)
		case destAttrStats:
			stats = v
		case destAttrStats64:
			stats64 = v
		case destAttrAddrFamily:
			fam = ne.Uint16(v)
		case destAttrTunType:
			d.Tunnel.Type = TunnelType(v[0])
		case destAttrTunPort:
			d.Tunnel.Port = binary.BigEndian.Uint16(v)
		case destAttrTunFlags:
			d.Tunnel.Flags = TunnelFlags(ne.Uint16(v))
		}
	}
	if raw == nil {
		return Destination{}, fmt.Errorf("destination without an address")
	}
	// The kernel sends a union of 16 bytes; an IPv4 address is the first 4.
	if fam == syscall.AF_INET6 && len(raw) >= 16 {
		d.Addr = netip.AddrFrom16([16]byte(raw[:16])).Unmap()
	} else {
		d.Addr = netip.AddrFrom4([4]byte(raw[:4]))
	}
	if d.Forwarding != Tunnel {
		d.Tunnel = TunnelOptions{}
	}
	var st Stats
	switch {
	case stats64 != nil:
		st, err = parseStats(stats64, true)
		d.Stats = &st
	case stats != nil:
		st, err = parseStats(stats, false)
		d.Stats = &st
	}
	return d, err
}

// parseStats reads a stats nest: every value 64-bit in IPVS_*_ATTR_STATS64,
// all but the byte counts 32-bit in the older IPVS_*_ATTR_STATS.
func parseStats(b []byte, wide bool) (Stats, error) {
	attrs, err := nl.ParseRouteAttr(b)
	if err != nil {
		return Stats{}, fmt.Errorf("parsing destination counters: %w", err)
	}
	var s Stats
	ne := nl.NativeEndian()
	for _, a := range attrs {
		typ, v := a.Attr.Type&nlaTypeMask, a.Value
		var n uint64
		switch {
		case wide || typ == statsAttrInBytes || typ == statsAttrOutBytes:
			if len(v) < 8 {
				continue // the pad attribute, or one this kernel sends short
			}
			n = ne.Uint64(v)
		case len(v) >= 4:
			n = uint64(ne.Uint32(v))
		default:
			continue
		}
		switch typ {
		case statsAttrConns:
			s.Connections = n
		case statsAttrInPkts:
			s.PacketsIn = n
		case statsAttrOutPkts:
			s.PacketsOut = n
		case statsAttrInBytes:
			s.BytesIn = n
		case statsAttrOutBytes:
			s.BytesOut = n
		case statsAttrCPS:
			s.Rates.ConnectionsPerSecond = n
		case statsAttrInPPS:
			s.Rates.PacketsInPerSecond = n
		case statsAttrOutPPS:
			s.Rates.PacketsOutPerSecond = n
		case statsAttrInBPS:
			s.Rates.BytesInPerSecond = n
		case statsAttrOutBPS:
			s.Rates.BytesOutPerSecond = n
		}
	}
	return s, nil
}
