package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/lvsd/lvsd/agent/views"
)

// writeStatusTotals prints the totals of a summary: services, VIPs,
// backends by state, connections, problems.
func writeStatusTotals(w io.Writer, t views.StatusTotals) {
	b := t.Backends
	fmt.Fprintf(w, "services: %d (%d IPVS services, %d in the kernel); VIPs: %d (%d held here)\n",
		t.Services, t.IPVSServices, t.InKernel, t.VIPs, t.VIPsHeld)
	states := []string{fmt.Sprintf("%d take new connections", b.Eligible)}
	for _, c := range []struct {
		n    int
		what string
	}{{b.Unhealthy, "unhealthy"}, {b.Pending, "health pending"}, {b.Draining, "draining"}, {b.NotInKernel, "NOT IN KERNEL"}} {
		if c.n > 0 {
			states = append(states, fmt.Sprintf("%d %s", c.n, c.what))
		}
	}
	fmt.Fprintf(w, "backends: %d: %s\n", b.Total, strings.Join(states, ", "))
	fmt.Fprintf(w, "connections: %d active, %d inactive\n", b.ActiveConns, b.InactiveConns)
}

// writeSummaryHint says what the summary left out and how to see it.
func writeSummaryHint(w io.Writer, st views.Status) error {
	if st.View == views.ViewSummary && st.Totals.Problems > len(st.Services) {
		fmt.Fprintf(w, "\nthe %d worst of %d IPVS services with a problem are shown; lvsd status --problems lists them all\n",
			len(st.Services), st.Totals.Problems)
	}
	_, err := fmt.Fprintln(w, "\nlvsd status --service NAME shows services with their backends (globs: 'web-*'), --all every one, "+
		"--json all of it for scripts")
	return err
}

// problemHeading introduces the services a summary lists.
func problemHeading(st views.Status) string {
	switch {
	case st.Totals.Problems == 0:
		return "no problems: every IPVS service is in the kernel with its backends, and some take new connections"
	case st.Totals.Problems == 1:
		return "1 IPVS service with a problem:"
	}
	return fmt.Sprintf("%d IPVS services with a problem, worst first:", st.Totals.Problems)
}
