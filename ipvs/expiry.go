package ipvs

import (
	"context"
	"fmt"
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
			if e.Matches(c) {
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
