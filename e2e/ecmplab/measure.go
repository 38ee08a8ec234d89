package ecmplab

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/lvsd/lvsd/e2e/topo"
)

// NextChange waits on a WatchRoute channel for the route to have n
// nexthops at or after since (older events still queued are skipped) and
// returns when the kernel said so.
func NextChange(ctx context.Context, events <-chan topo.RouteEvent, n int, since time.Time) (time.Time, error) {
	for {
		select {
		case ev, ok := <-events:
			if !ok {
				return time.Time{}, fmt.Errorf("route watch ended")
			}
			if len(ev.Nexthops) == n && !ev.At.Before(since) {
				return ev.At, nil
			}
		case <-ctx.Done():
			return time.Time{}, fmt.Errorf("waiting for %d nexthops: %w", n, ctx.Err())
		}
	}
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
