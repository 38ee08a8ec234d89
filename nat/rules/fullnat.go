package rules

import (
	"fmt"
	"net/netip"
	"time"

	"github.com/lvsd/lvsd/ipvs/l4"
)

// ConntrackEntry is the conntrack entry of one FULLNAT connection.
type ConntrackEntry struct {
	Protocol l4.Protocol    // TCP or UDP
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
	// CreateTimeout, when not zero, is the lifetime of an entry this
	// creates, Timeout staying that of an existing one it refreshes:
	// another director's connection seen for the first time may be a
	// single spoofed packet, and its entry need not outlive the kernel's
	// own unreplied flows; a second record says it is alive.
	CreateTimeout time.Duration
	// NoCreate only refreshes an existing entry of the connection (it
	// needs Refresh): the director's budget of entries for other
	// directors' connections is spent, and an entry that exists already
	// costs nothing.
	NoCreate bool
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

// String names the connection in errors.
func (e ConntrackEntry) String() string {
	return fmt.Sprintf("%s %s -> %s -> %s", e.Protocol, e.Client, e.VIP, e.Backend)
}

// FullNATEntry returns the conntrack entry that rs gives a connection from
// client to vip that IPVS sent to backend: the ct mark of the first fullnat
// rule that matches it, as the prerouting chain would, and the SNAT range of
// that mark. ok is false when rs does not source-NAT the connection (it
// belongs to a DR or NAT service, or a protocol other than TCP and UDP).
// It costs a map lookup and a binary search whatever the number of rules
// (fullnatIndex): a takeover asks for each synced connection.
func (rs Ruleset) FullNATEntry(proto l4.Protocol, client, vip, backend netip.AddrPort) (e ConntrackEntry, ok bool) {
	if proto != l4.TCP && proto != l4.UDP || rs.fullnat == nil {
		return ConntrackEntry{}, false
	}
	for i := range rs.fullnat.tables {
		ti := &rs.fullnat.tables[i]
		if ti.family != familyOf(vip.Addr()) {
			continue
		}
		target, matched := ti.lookup(proto, client.Addr(), vip)
		if !matched {
			continue
		}
		if !target.snat {
			return ConntrackEntry{}, false // first match wins, even without SNAT
		}
		return ConntrackEntry{Protocol: proto, Client: client, VIP: vip, Backend: backend,
			SNATFrom: target.to.From, SNATTo: target.to.To, Mark: target.mark}, true
	}
	return ConntrackEntry{}, false
}

// fullnatScan is FullNATEntry by going through the rules as the kernel
// does: the model the index must follow (its tests compare the two).
func (rs Ruleset) fullnatScan(proto l4.Protocol, client, vip, backend netip.AddrPort) (e ConntrackEntry, ok bool) {
	if proto != l4.TCP && proto != l4.UDP {
		return ConntrackEntry{}, false
	}
	for _, t := range rs.tables {
		if t.Family != familyOf(vip.Addr()) {
			continue
		}
		for _, r := range t.FullNAT {
			mark, ok := t.fullnatMark(r, proto, client.Addr(), vip)
			if !ok {
				continue
			}
			for _, m := range t.SNATMarks {
				if m.Mark != mark {
					continue
				}
				if m.Chain < 0 || m.Chain >= len(t.SNATChains) {
					break
				}
				to := t.SNATChains[m.Chain]
				return ConntrackEntry{Protocol: proto, Client: client, VIP: vip, Backend: backend,
					SNATFrom: to.From, SNATTo: to.To, Mark: mark}, true
			}
			return ConntrackEntry{}, false // first match wins, even without SNAT
		}
	}
	return ConntrackEntry{}, false
}

// fullnatMark is the ct mark that rule r of the fullnat chain gives a
// connection, and whether r matches it: for a map lookup, whether an
// element of the map matches, as the kernel looks it up.
func (t Table) fullnatMark(r Rule, proto l4.Protocol, client netip.Addr, vip netip.AddrPort) (uint32, bool) {
	switch r.SetCtMarkMap {
	case ByPort, ByPortRange:
		for _, m := range t.portMarks(r.SetCtMarkMap) {
			if m.VIP == vip.Addr() && m.Proto == proto && m.Ports.From <= vip.Port() && vip.Port() <= m.Ports.To {
				return m.Mark, true
			}
		}
		return 0, false
	case ByVIP:
		for _, m := range t.VIPMarks {
			if m.VIP == vip.Addr() {
				return m.Mark, true
			}
		}
		return 0, false
	}
	return r.SetCtMark, r.matchesConn(proto, client, vip)
}

// matchesConn reports whether a packet from client to vip passes the rule's
// matches (daddr, saddr, protocol, ports).
func (r Rule) matchesConn(proto l4.Protocol, client netip.Addr, vip netip.AddrPort) bool {
	if r.DAddr != vip.Addr() || r.Proto != l4.Any && r.Proto != proto {
		return false
	}
	if len(r.SAddr) > 0 && !inRanges(r.SAddr, client) {
		return false
	}
	if len(r.Ports) == 0 {
		return true
	}
	for _, p := range r.Ports {
		if p.From <= vip.Port() && vip.Port() <= p.To {
			return true
		}
	}
	return false
}

func inRanges(rs []AddrRange, a netip.Addr) bool {
	for _, r := range rs {
		if r.From.Compare(a) <= 0 && a.Compare(r.To) <= 0 {
			return true
		}
	}
	return false
}

// FullNATVIPs returns the FULLNAT VIPs whose connections depend on address
// a: a itself if it is the VIP of a fullnat rule, and every VIP whose rules
// source-NAT to a range that holds a. Its cost is linear in the rules: a
// takeover asks it for each address it adds, and 10,000 FULLNAT services
// sharing their source addresses make 10,000 map elements of each kind.
func (rs Ruleset) FullNATVIPs(a netip.Addr) []netip.Addr {
	var out []netip.Addr
	seen := map[netip.Addr]bool{}
	for _, t := range rs.tables {
		chains := map[int]bool{} // the SNAT chains whose range holds a
		for i, to := range t.SNATChains {
			chains[i] = inRanges([]AddrRange{to}, a)
		}
		marks := map[uint32]bool{} // of those chains
		seenMark := map[uint32]bool{}
		for _, m := range t.SNATMarks { // the first element of a mark decides, as in snatTargets
			if !seenMark[m.Mark] {
				seenMark[m.Mark] = true
				marks[m.Mark] = chains[m.Chain]
			}
		}
		add := func(vip netip.Addr, mark uint32) {
			if (vip == a || marks[mark]) && !seen[vip] {
				seen[vip] = true
				out = append(out, vip)
			}
		}
		// The map elements as they are, not as fullnatRules' copies:
		// a takeover asks once per address it adds.
		for _, r := range t.FullNAT {
			switch r.SetCtMarkMap {
			case ByPort, ByPortRange:
				for _, m := range t.portMarks(r.SetCtMarkMap) {
					add(m.VIP, m.Mark)
				}
			case ByVIP:
				for _, m := range t.VIPMarks {
					add(m.VIP, m.Mark)
				}
			default:
				add(r.DAddr, r.SetCtMark)
			}
		}
	}
	return out
}
