package ipvs

// Destinations are read through lvsd's own generic netlink, one dump per
// service on a socket kept open between reads: moby/ipvs reads neither the
// 64-bit counters (IPVS_DEST_ATTR_STATS64, Linux 4.1; its 32-bit ones wrap
// after 4 G packets) nor the tunnel encapsulation, and a second dump for
// them would double the cost of every read-back.

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"syscall"
	"time"

	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
)

// Destination attributes only read (include/uapi/linux/ip_vs.h).
const (
	destAttrActiveConns  = 7  // u32
	destAttrInactConns   = 8  // u32
	destAttrPersistConns = 9  // u32
	destAttrStats        = 10 // nest of 32-bit counters (rates 32-bit too)
	destAttrStats64      = 12 // nest of 64-bit counters (Linux 4.1)

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
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	timeout := genlTimeout
	if dl, ok := ctx.Deadline(); ok {
		timeout = max(min(timeout, time.Until(dl)), time.Millisecond)
	}
	tv := unix.NsecToTimeval(timeout.Nanoseconds())
	_ = k.dump.s.SetSendTimeout(&tv)
	_ = k.dump.s.SetReceiveTimeout(&tv)
	return k.dump, nil
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
	msgs, err := c.exec(genlCmdGetDest, unix.NLM_F_DUMP, encodeServiceKey(svc))
	if err != nil {
		var errno syscall.Errno
		if !errors.As(err, &errno) { // not the kernel's answer: the socket may hold a half dump
			k.closeDump()
		}
		return nil, fmt.Errorf("listing destinations of %s: %w", svc, kernelErr(err))
	}
	out, err := parseDestinations(msgs, serviceFamily(svc))
	if err != nil {
		return nil, fmt.Errorf("listing destinations of %s: %w", svc, err)
	}
	return out, nil
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
			d.ActiveConns = int(ne.Uint32(v))
		case destAttrInactConns:
			d.InactiveConns = int(ne.Uint32(v))
		case destAttrPersistConns:
			d.PersistentConns = int(ne.Uint32(v))
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
