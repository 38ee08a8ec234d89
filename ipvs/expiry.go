package ipvs

import (
	"context"
	"fmt"
	"net/netip"
	"time"
)

// The kernel has no call that deletes IPVS connection entries. What it has
// is net.ipv4.vs.expire_nodest_conn: with it set, deleting a destination
// queues a work item (ip_vs_expire_nodest_conn_flush) that expires every
// entry whose destination is gone, and a packet of such an entry expires it
// at once instead of being dropped. A
// client's next packet then finds no entry: a TCP client gets a reset, a UDP
// flow is scheduled afresh. Measured in the test VM (Debian 6.1): the
// entries leave within 0.13 s of the delete and the client's next segment is
// answered with a reset in ~3 ms; with the default 0 the client hangs until
// the 15-minute ESTABLISHED timeout.
//
// Re-adding the destination before that work ran can revive it from the
// kernel's trash with its entries (ip_vs_trash_get_dest): so a reset is
// delete, AwaitExpiry, then add.

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

func (e Expiring) matches(c Connection) bool {
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

// AwaitExpiry polls the connection table until no entry matches e, with a
// growing pause (5 ms doubling to 200 ms: the kernel's work usually runs
// within milliseconds, while reading a large table is costly). It gives up
// when ctx ends, saying how many entries are left.
func AwaitExpiry(ctx context.Context, l ConnectionLister, e Expiring) error {
	pause := 5 * time.Millisecond
	for {
		conns, err := l.Connections(ctx)
		if err != nil {
			return err
		}
		left := 0
		for _, c := range conns {
			if e.matches(c) {
				left++
			}
		}
		if left == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%d connection entries of %s still present (is net.ipv4.vs.expire_nodest_conn 1?): %w", left, e.VIP, ctx.Err())
		case <-time.After(pause):
		}
		pause = min(2*pause, 200*time.Millisecond)
	}
}
