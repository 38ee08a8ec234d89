package main

import (
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/lvsd/lvsd/agent"
	"github.com/lvsd/lvsd/cluster"
	"github.com/lvsd/lvsd/cluster/bgp"
	"github.com/lvsd/lvsd/cluster/connsync"
)

// writeClusterStatus prints the director cluster as this director sees it:
// its state, then a line per director and per VIP.
func writeClusterStatus(w io.Writer, v *cluster.View) error {
	enc := "encrypted"
	if !v.Encrypted {
		enc = "INSECURE (not encrypted)"
	}
	fmt.Fprintf(w, "cluster: %s, %s, %s, quorum %d, %d live", v.State, v.Mode, enc, v.Quorum, v.Live)
	if v.IdentitiesEnforced {
		fmt.Fprint(w, ", identities enforced")
	}
	if v.Stalls > 0 {
		fmt.Fprintf(w, ", %d scheduling stalls", v.Stalls)
	}
	if len(v.Refused) > 0 {
		var total uint64
		reasons := make([]string, 0, len(v.Refused))
		for reason, n := range v.Refused {
			total += n
			reasons = append(reasons, fmt.Sprintf("%d %s", n, reason))
		}
		slices.Sort(reasons)
		fmt.Fprintf(w, ", %d heartbeats refused (%s)", total, strings.Join(reasons, ", "))
	}
	fmt.Fprintln(w)
	members := [][]string{{"DIRECTOR", "ADDRESS", "PRIORITY", "GOSSIP", "LIVE", "READY", "HOLDS"}}
	if v.ConfigDigest != "" {
		members[0] = slices.Insert(members[0], 6, "CONFIG")
	}
	for _, m := range v.Members {
		name := m.Name
		if m.Self {
			name += " (this)"
		}
		row := []string{name, m.Address, strconv.Itoa(m.Priority), m.Gossip, yesNo(m.Live), yesNo(m.Ready), strings.Join(m.Holds, " ")}
		if v.ConfigDigest != "" {
			row = slices.Insert(row, 6, configColumn(v, m))
		}
		members = append(members, row)
	}
	vips := [][]string{{"VIP", "OWNER", "HELD HERE", "CLAIMED BY"}}
	for _, p := range v.VIPs {
		owner := p.Owner
		if owner == "" {
			owner = "none"
		}
		vips = append(vips, []string{p.VIP, owner, yesNo(p.Held), strings.Join(p.Holders, " ")})
	}
	if err := writeTable(w, "  ", members); err != nil {
		return err
	}
	if err := writeTable(w, "  ", vips); err != nil {
		return err
	}
	for _, m := range v.Members {
		if c := m.Config; c != nil && c.Match == cluster.ConfigDifferent {
			fmt.Fprintf(w, "  %s\n", driftLine(m.Name, c))
		}
		if m.RestartHoldSeconds > 0 {
			fmt.Fprintf(w, "  %s is restarting: its VIPs stay where they are for %.0fs more (restart hold)\n", m.Name, m.RestartHoldSeconds)
		}
	}
	_, err := fmt.Fprintln(w)
	return err
}

// configColumn is how a director's service configuration compares with
// this one's: this one's digest, then same, DIFFERS or unknown (a release
// without drift detection).
func configColumn(v *cluster.View, m cluster.MemberView) string {
	switch {
	case m.Self:
		return v.ConfigDigest[:min(len(v.ConfigDigest), 8)]
	case m.Config == nil:
		return ""
	case m.Config.Match == cluster.ConfigDifferent:
		return "DIFFERS"
	}
	return m.Config.Match
}

// driftLine names the services a peer defines differently.
func driftLine(peer string, c *cluster.ConfigView) string {
	var b strings.Builder
	noun := "services"
	if c.Differing == 1 {
		noun = "service"
	}
	fmt.Fprintf(&b, "CONFIGURATION DIFFERS from %s in %d %s", peer, c.Differing, noun)
	if !c.Compared {
		b.WriteString(" so far (comparing)")
	}
	if len(c.Services) > 0 {
		fmt.Fprintf(&b, ": %s", strings.Join(c.Services, " "))
		if more := c.Differing - len(c.Services); more > 0 {
			fmt.Fprintf(&b, " and %d more", more)
		}
	}
	switch {
	case c.Held:
		b.WriteString("; only by the change HELD here, not in force yet: the peer runs what is in force here, no flow is at risk")
	case c.FlowsAtRisk:
		b.WriteString("; under ecmp their flows are at risk (a rehashed flow may reach another backend)")
	}
	return b.String()
}

// writeGracefulRestart says, while a director that restarted gracefully
// starts up, when its sessions open and which routers keep its paths from
// before the restart, as far as its speaker knows.
func writeGracefulRestart(w io.Writer, b *bgp.Status) {
	g := b.GracefulRestart
	if g == nil || !g.Restarted {
		return
	}
	if !g.OpenBy.IsZero() {
		fmt.Fprintf(w, "  RESTARTED GRACEFULLY: the sessions open with the first routes, at %s at the latest\n",
			g.OpenBy.Format(time.DateTime))
	}
	var keeping []string
	for _, p := range b.Peers {
		if p.KeepsStalePaths {
			keeping = append(keeping, p.Address.String())
		}
	}
	if len(keeping) > 0 {
		fmt.Fprintf(w, "  routers keeping this director's paths from before the restart (stale) until their session is back "+
			"with the routes, at most until %s: %s\n", g.StaleUntil.Format(time.DateTime), strings.Join(keeping, " "))
	}
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

// writeConnSyncStatus prints the connection-sync relay's counters on one
// line.
func writeConnSyncStatus(w io.Writer, s *connsync.Stats) error {
	dropped := s.DroppedInvalid + s.DroppedStale + s.DroppedOverflow + s.DroppedWrite + s.DroppedBackupDown + s.Evicted
	_, err := fmt.Fprintf(w, "connection sync: %d records from the kernel (%d pushes), %d sent (%d replayed), %d received, "+
		"%d applied (%d confirmed in the kernel at start), %d cached, lag %s (max %s), %d dropped\n\n", s.MasterRecords, s.Pushes, s.SentRecords, s.ReplayedRecords,
		s.ReceivedRecords, s.AppliedRecords, s.ConfirmedRecords, s.CacheSize, s.LastLag.Round(time.Millisecond),
		s.MaxLag.Round(time.Millisecond), dropped)
	return err
}

// writeTOAStatus prints the TOA program on one line.
func writeTOAStatus(w io.Writer, t *agent.TOAStatus) {
	at := "attached nowhere"
	if len(t.Interfaces) > 0 {
		at = "on " + strings.Join(t.Interfaces, ", ")
	}
	fmt.Fprintf(w, "client address (toa): %s, %d VIP:ports, %d options added, %d SYNs without room, %d forged options stripped, %d unsupported SYNs\n\n",
		at, len(t.Services), t.Added, t.NoRoom, t.Stripped, t.Unsupported)
}

// writeBGPStatus prints the BGP speaker: a line per router and the routes.
func writeBGPStatus(w io.Writer, b *bgp.Status, drained bool, drainedAt time.Time) error {
	state := "in service"
	if drained {
		state = "DRAINED since " + drainedAt.Format(time.DateTime)
	}
	gr := "graceful restart off"
	if g := b.GracefulRestart; g != nil {
		gr = fmt.Sprintf("graceful restart on (restart time %ds)", g.RestartTime/time.Second) // whole seconds, as configured
	}
	fmt.Fprintf(w, "bgp: AS %d, router id %s, %s, %d routes announced, %d TCP-MD5 failures, %s\n", b.ASN, b.RouterID, state,
		len(b.Routes), b.MD5Failures, gr)
	writeGracefulRestart(w, b)
	rows := [][]string{{"ROUTER", "AS", "SESSION", "SINCE", "BFD", "FLAPS", "LAST FLAP"}}
	for _, p := range b.Peers {
		last := "-"
		if !p.LastFlap.IsZero() {
			last = p.LastFlap.Format(time.DateTime) + " " + p.LastFlapReason
		}
		bfdState := p.BFD
		if bfdState == "" {
			bfdState = "off"
		} else if p.BFDDowns > 0 {
			bfdState += fmt.Sprintf(" (%d down)", p.BFDDowns)
		}
		rows = append(rows, []string{p.Address.String(), strconv.FormatUint(uint64(p.ASN), 10), string(p.State),
			p.Since.Format(time.TimeOnly), bfdState, strconv.Itoa(p.Flaps), last})
	}
	if err := writeTable(w, "  ", rows); err != nil {
		return err
	}
	var routes []string
	for _, r := range b.Routes {
		routes = append(routes, r.Prefix.String())
	}
	_, err := fmt.Fprintf(w, "  announced: %s\n\n", strings.Join(routes, " "))
	return err
}
