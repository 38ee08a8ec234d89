package spec

import (
	"net/netip"
)

// ConnectionExpirySysctls are, per network namespace and for every IPVS
// service in it:
//
//   - expire_nodest_conn=1: connections of a deleted destination are dropped
//     (the client is reset) instead of hanging; lvsd deletes a destination
//     only to drop its connections or after its drain ended;
//   - expire_quiescent_template=1: a persistence template pointing at a
//     destination of weight 0 is dropped at the client's next connection,
//     so per-session clients follow the eligibility policy (an ineligible
//     backend gets no new connection) while their established ones go on.
func ConnectionExpirySysctls() map[string]string {
	return map[string]string{ExpireNodestConn: "1", SysctlPrefix + "expire_quiescent_template": "1"}
}

// ExpireNodestConn is the sysctl that makes the kernel drop the
// connections of a deleted destination.
const ExpireNodestConn = SysctlPrefix + "expire_nodest_conn"

// Expiring names the connection entries a reset waits for: those of the
// service at VIP (Port 0: any port, as for a firewall-mark service) whose
// destination is one of Dests (a destination of port 0 matches any port).
// Persistence templates are not waited for: the flush skips a template
// while connections it controls are still being torn down, and it would
// then live out its persistence timeout; it is harmless, since with
// expire_quiescent_template a template of a weight-0 destination is
// dropped at the client's next connection.
type Expiring struct {
	VIP   netip.Addr
	Port  uint16
	Dests []DestinationKey
}

// Matches reports whether c is one of the entries e names.
func (e Expiring) Matches(c Connection) bool {
	if c.Protocol == 0 || c.Virtual.Addr().Unmap() != e.VIP || e.Port != 0 && c.Virtual.Port() != e.Port {
		return false
	}
	for _, d := range e.Dests {
		if c.Dest.Addr().Unmap() == d.Addr && (d.Port == 0 || c.Dest.Port() == d.Port) {
			return true
		}
	}
	return false
}
