//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/lvsd/lvsd/e2e/topo"
)

// conntrackCensus counts h's conntrack entries by what decides how long
// they stay: protocol, TCP state, flags, mark, whether the original
// destination is vip, and the time left (≤30 s, ≤120 s, ≤300 s, more). It
// returns the n biggest groups, biggest first, as one line.
func conntrackCensus(ctx context.Context, h *topo.Host, vip string, n int) string {
	out, err := h.Run(ctx, "conntrack", "-L")
	if err != nil {
		return fmt.Sprintf("conntrack -L: %v", err)
	}
	groups := map[string]int{}
	for line := range strings.Lines(out) {
		f := strings.Fields(line)
		if len(f) < 4 || (f[0] != "tcp" && f[0] != "udp") {
			continue
		}
		left, _ := strconv.Atoi(f[2])
		key := []string{f[0]}
		if f[0] == "tcp" {
			key = append(key, f[3])
		}
		toVIP := false
		for _, w := range f {
			switch {
			case strings.HasPrefix(w, "["):
				key = append(key, strings.Trim(w, "[]"))
			case strings.HasPrefix(w, "mark=") && w != "mark=0":
				key = append(key, w)
			case w == "dst="+vip:
				toVIP = true
			}
		}
		if !toVIP {
			key = append(key, "other")
		}
		key = append(key, ageBucket(left))
		groups[strings.Join(key, " ")]++
	}
	keys := make([]string, 0, len(groups))
	for k := range groups {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return groups[keys[i]] > groups[keys[j]] })
	var b strings.Builder
	for i, k := range keys {
		if i == n {
			break
		}
		fmt.Fprintf(&b, "%s: %d; ", k, groups[k])
	}
	return strings.TrimSuffix(b.String(), "; ")
}

func ageBucket(left int) string {
	for _, b := range []int{30, 120, 300} {
		if left <= b {
			return "≤" + strconv.Itoa(b) + "s"
		}
	}
	return ">300s"
}
