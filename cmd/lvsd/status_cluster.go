package main

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/lvsd/lvsd/cluster"
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
	if v.Stalls > 0 {
		fmt.Fprintf(w, ", %d scheduling stalls", v.Stalls)
	}
	fmt.Fprintln(w)
	members := [][]string{{"DIRECTOR", "ADDRESS", "PRIORITY", "GOSSIP", "LIVE", "READY", "HOLDS"}}
	for _, m := range v.Members {
		name := m.Name
		if m.Self {
			name += " (this)"
		}
		members = append(members, []string{name, m.Address, strconv.Itoa(m.Priority), m.Gossip, yesNo(m.Live),
			yesNo(m.Ready), strings.Join(m.Holds, " ")})
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
	_, err := fmt.Fprintln(w)
	return err
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
	dropped := s.DroppedInvalid + s.DroppedStale + s.DroppedOverflow + s.DroppedWrite + s.Evicted
	_, err := fmt.Fprintf(w, "connection sync: %d records from the kernel (%d pushes), %d sent (%d replayed), %d received, "+
		"%d applied, %d cached, lag %s (max %s), %d dropped\n\n", s.MasterRecords, s.Pushes, s.SentRecords, s.ReplayedRecords,
		s.ReceivedRecords, s.AppliedRecords, s.CacheSize, s.LastLag.Round(time.Millisecond),
		s.MaxLag.Round(time.Millisecond), dropped)
	return err
}
