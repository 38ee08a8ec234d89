package connsync

import (
	"encoding/binary"
	"net/netip"

	"github.com/lvsd/lvsd/cluster/connsync/records"
)

// A relayed record becomes a connection in this director's IPVS table, and
// the backup daemon creates one for any record, service or not: a forged
// record could send a client's packets anywhere. The cluster key only says
// a director sent it, so a record is applied only if
//
//   - its service and real server are configured here (SetServices), and
//   - its sender may speak for the VIP (Authority): it holds the VIP in
//     this director's view of the cluster.

// Authority decides whether a director may send connection records of a
// VIP. The cluster node answers from the heartbeats (the sender holds the
// VIP, or released it a moment ago). Under ECMP every ready director holds
// every VIP it serves, so the same answer holds. It must be safe for
// concurrent use.
type Authority interface {
	MaySend(sender string, vip netip.Addr) bool
}

// Service is a virtual service configured on this director, as the records
// of its connections name it (cluster/connsync/records, which the agent
// fills in without linking this package).
type Service = records.Service

// services indexes the configured services for record lookups. It is never
// modified once built.
type services struct {
	byAddr map[addrKey]*svcDests
	byMark map[uint32]*svcDests
}

type addrKey struct {
	proto uint8
	vip   netip.Addr
	port  uint16
}

type svcDests struct {
	vip   netip.Addr
	dests map[netip.AddrPort]bool
}

func indexServices(list []Service) *services {
	ix := &services{byAddr: map[addrKey]*svcDests{}, byMark: map[uint32]*svcDests{}}
	for _, s := range list {
		d := &svcDests{vip: s.VIP.Unmap(), dests: map[netip.AddrPort]bool{}}
		for _, a := range s.Dests {
			d.dests[netip.AddrPortFrom(a.Addr().Unmap(), a.Port())] = true
		}
		if s.FWMark != 0 {
			ix.byMark[s.FWMark] = d
		} else {
			ix.byAddr[addrKey{uint8(s.Protocol), d.vip, s.Port}] = d
		}
	}
	return ix
}

// lookup returns the VIP of r's service if r's service and real server are
// configured. It follows the backup daemon's own lookup (ip_vs_find_dest):
// a record's firewall mark finds a mark service first, else its protocol,
// VIP and port find an address service. A persistence template of a mark
// service (ip_vs_sched_persist) carries the mark as its virtual address,
// protocol 0 and ports 0.
func (ix *services) lookup(r rec) (vip netip.Addr, ok bool) {
	if ix == nil {
		return netip.Addr{}, false
	}
	d := r.dest()
	template := r.flags()&connFTemplate != 0
	if template && r.protocol() == protoIP {
		va := r.vaddr().AsSlice()
		s := ix.byMark[binary.BigEndian.Uint32(va)]
		rest := va[4:]
		for len(rest) > 0 && rest[0] == 0 {
			rest = rest[1:]
		}
		return ix.ok(s, s != nil && len(rest) == 0 && r.vport() == 0 && d.Port() == 0 && s.hasAddr(d.Addr()))
	}
	if s := ix.byMark[r.fwmark()]; s != nil && r.fwmark() != 0 {
		return ix.ok(s, r.vaddr() == s.vip && (s.dests[d] || s.dests[netip.AddrPortFrom(d.Addr(), 0)] && d.Port() == r.vport()))
	}
	s := ix.byAddr[addrKey{r.protocol(), r.vaddr(), r.vport()}]
	return ix.ok(s, s != nil && s.dests[d])
}

func (ix *services) ok(s *svcDests, ok bool) (netip.Addr, bool) {
	if !ok {
		return netip.Addr{}, false
	}
	return s.vip, true
}

func (s *svcDests) hasAddr(a netip.Addr) bool {
	for d := range s.dests {
		if d.Addr() == a {
			return true
		}
	}
	return false
}
