package ecmplab

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/lvsd/lvsd/e2e/topo"
)

// Await waits on a WatchRoute channel for a change at or after since
// (older events still queued are skipped) after which the nexthops satisfy
// cond, and returns when the kernel said so.
func Await(ctx context.Context, events <-chan topo.RouteEvent, since time.Time, cond func([]netip.Addr) bool) (time.Time, error) {
	for {
		select {
		case ev, ok := <-events:
			if !ok {
				return time.Time{}, fmt.Errorf("route watch ended")
			}
			if !ev.At.Before(since) && cond(ev.Nexthops) {
				return ev.At, nil
			}
		case <-ctx.Done():
			return time.Time{}, fmt.Errorf("waiting for a route change: %w", ctx.Err())
		}
	}
}

// Count is a condition for Await: exactly n nexthops.
func Count(n int) func([]netip.Addr) bool {
	return func(nh []netip.Addr) bool { return len(nh) == n }
}

// Without is a condition for Await: a is not a nexthop.
func Without(a netip.Addr) func([]netip.Addr) bool {
	return func(nh []netip.Addr) bool { return !slices.Contains(nh, a) }
}

// With is a condition for Await: a is a nexthop.
func With(a netip.Addr) func([]netip.Addr) bool {
	return func(nh []netip.Addr) bool { return slices.Contains(nh, a) }
}

// Summary is "min/median/max (n runs)" of durations, in seconds with
// two decimals.
func Summary(ds []time.Duration) string {
	if len(ds) == 0 {
		return "no runs"
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	sec := func(d time.Duration) string { return fmt.Sprintf("%.2f", d.Seconds()) }
	return fmt.Sprintf("%s/%s/%s s (%d runs)", sec(s[0]), sec(s[len(s)/2]), sec(s[len(s)-1]), len(s))
}

// BFDPeers parses `show bfd peers brief` into peer address → status.
func BFDPeers(brief string) map[string]string {
	out := map[string]string{}
	for _, line := range strings.Split(brief, "\n") {
		f := strings.Fields(line)
		if len(f) == 4 && f[0] != "SessionId" && !strings.HasPrefix(f[0], "=") {
			out[f[2]] = f[3]
		}
	}
	return out
}
