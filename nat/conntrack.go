package nat

import (
	"context"
	"net/netip"
	"time"
)

// FULLNAT connections after a takeover. IPVS connection sync gives the new
// owner of a VIP the IPVS entries of its connections, but not the conntrack
// entries that carry their source NAT. A real server's packet to a SNAT
// address then finds no entry on the new owner and would reach its local
// stack (which answers with a reset) instead of being translated back to the
// client. So before the new owner adds the addresses, it creates for every
// synced connection the entry the old owner had:
//
//	original  client:cport -> VIP:vport
//	reply     RS:rport     -> SNAT:sport
//
// The reply is not written as such: the entry is created with the reply
// RS:rport -> client:cport (what ip_vs_update_conntrack made it before the
// SNAT rule ran) and a source NAT to the SNAT address the old owner's rule
// chose, a hash of the client address (conntrack_hash.go). The kernel then
// does what it did on the old owner: it keeps the client's port while no
// other entry uses SNAT:cport -> RS:rport.

// ConntrackEntry is the conntrack entry of one FULLNAT connection.
type ConntrackEntry struct {
	Protocol Protocol       // TCP or UDP
	Client   netip.AddrPort // original source
	VIP      netip.AddrPort // original destination
	Backend  netip.AddrPort // the real server: where IPVS sent the connection
	// SNATFrom and SNATTo are the service's SNAT range (the same address
	// for one).
	SNATFrom, SNATTo netip.Addr
	// Mark is the connection mark the FULLNAT rules give the connection.
	Mark uint32
	// Timeout is the entry's lifetime until its next packet.
	Timeout time.Duration
	// Refresh makes an existing entry this one: the connection is alive
	// on another director, which this one hears of while no packet of it
	// comes here. The entry of the same connection (its reply tuple, with
	// the source NAT, matches) gets Timeout, and Closing's state; an entry
	// of another connection with the same original tuple (the client
	// reused its port) is replaced.
	Refresh bool
	// Closing creates the entry (or, with Refresh, turns an existing one)
	// in TCP state TIME_WAIT with the close seen: it still translates
	// whatever packets come, and a client's new connection with the same
	// ports reopens it, as conntrack does on the director that saw the
	// close (nf_conntrack_proto_tcp.c, "Attempt to reopen a closed/aborted
	// connection").
	Closing bool
}

// RestoreResult counts what RestoreConntrack did.
type RestoreResult struct {
	Created  int // new entries
	Existing int // already there (EEXIST): a local connection or an earlier restore
	// Refreshed counts the existing entries given their Timeout (Refresh);
	// an entry that went meanwhile is neither refreshed nor failed.
	Refreshed int
	// Replaced counts the existing entries of another connection (Refresh)
	// deleted and created again as asked.
	Replaced int
	Failed   int // refused by the kernel; the error says why
}

// ConntrackRestorer creates conntrack entries. Kernel and ConntrackFake
// implement it.
type ConntrackRestorer interface {
	// RestoreConntrack creates every entry that does not exist yet. It goes
	// on after a failed entry; the error joins the first failures.
	RestoreConntrack(ctx context.Context, entries []ConntrackEntry) (RestoreResult, error)
}

// FullNATEntry returns the conntrack entry that rs gives a connection from
// client to vip that IPVS sent to backend: the ct mark of the first fullnat
// rule that matches it, as the prerouting chain would, and the SNAT range of
// that mark. ok is false when rs does not source-NAT the connection (it
// belongs to a DR or NAT service, or a protocol other than TCP and UDP).
func (rs Ruleset) FullNATEntry(proto Protocol, client, vip, backend netip.AddrPort) (e ConntrackEntry, ok bool) {
	if proto != TCP && proto != UDP {
		return ConntrackEntry{}, false
	}
	for _, t := range rs.tables {
		if t.fam != familyOf(vip.Addr()) {
			continue
		}
		for _, r := range t.fullnat {
			if !r.matchesConn(proto, client.Addr(), vip) {
				continue
			}
			for _, p := range t.post {
				if p.ctMark == r.setCtMark {
					return ConntrackEntry{Protocol: proto, Client: client, VIP: vip, Backend: backend,
						SNATFrom: p.snat.from, SNATTo: p.snat.to, Mark: r.setCtMark}, true
				}
			}
			return ConntrackEntry{}, false // first match wins, even without SNAT
		}
	}
	return ConntrackEntry{}, false
}

// matchesConn reports whether a packet from client to vip passes the rule's
// matches (daddr, saddr, protocol, ports).
func (r rule) matchesConn(proto Protocol, client netip.Addr, vip netip.AddrPort) bool {
	if r.daddr != vip.Addr() || r.proto != AnyProtocol && r.proto != proto {
		return false
	}
	if len(r.saddr) > 0 && !inRanges(r.saddr, client) {
		return false
	}
	if len(r.ports) == 0 {
		return true
	}
	for _, p := range r.ports {
		if p.From <= vip.Port() && vip.Port() <= p.To {
			return true
		}
	}
	return false
}

func inRanges(rs []addrRange, a netip.Addr) bool {
	for _, r := range rs {
		if r.from.Compare(a) <= 0 && a.Compare(r.to) <= 0 {
			return true
		}
	}
	return false
}

// FullNATVIPs returns the FULLNAT VIPs whose connections depend on address
// a: a itself if it is the VIP of a fullnat rule, and every VIP whose rules
// source-NAT to a range that holds a.
func (rs Ruleset) FullNATVIPs(a netip.Addr) []netip.Addr {
	var out []netip.Addr
	add := func(v netip.Addr) {
		for _, x := range out {
			if x == v {
				return
			}
		}
		out = append(out, v)
	}
	for _, t := range rs.tables {
		for _, r := range t.fullnat {
			if r.daddr == a {
				add(r.daddr)
				continue
			}
			for _, p := range t.post {
				if p.ctMark == r.setCtMark && inRanges([]addrRange{p.snat}, a) {
					add(r.daddr)
				}
			}
		}
	}
	return out
}
