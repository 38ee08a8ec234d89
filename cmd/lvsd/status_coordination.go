package main

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/lvsd/lvsd/agent"
)

// maxHeldShown bounds the services a held change lists in the status.
const maxHeldShown = 20

// writeHeldChange prints the change of services that waits for the other
// directors (cluster.coordinated_changes), one line per service.
func writeHeldChange(w io.Writer, h *agent.HeldChange, now time.Time) {
	if h == nil {
		return
	}
	waited := now.Sub(h.Since).Round(time.Second)
	deadline := ""
	if !h.Until.IsZero() { // an agent of the previous release does not say
		deadline = ", in force at the latest at " + h.Until.Format(time.DateTime)
	}
	fmt.Fprintf(w, "configuration change HELD until every live director has it (%s of at most %s%s):\n", waited, h.Wait, deadline)
	names := slices.Sorted(maps.Keys(h.Lagging))
	for _, name := range names[:min(len(names), maxHeldShown)] {
		lagging := "directors not compared yet"
		if l := h.Lagging[name]; len(l) > 0 {
			lagging = strings.Join(l, ", ")
		}
		fmt.Fprintf(w, "  %s: new definition waits for %s (%s)\n", name, lagging, waited)
	}
	if len(names) > maxHeldShown {
		fmt.Fprintf(w, "  and %d more services\n", len(names)-maxHeldShown)
	}
	if len(h.Unknown) > 0 {
		fmt.Fprintf(w, "  not waited for (no comparable digest, an earlier release): %s\n", strings.Join(h.Unknown, ", "))
	}
}
