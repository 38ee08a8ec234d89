package agent

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"time"

	"github.com/lvsd/lvsd/ipvs"
	"github.com/lvsd/lvsd/ipvs/l4"
	"github.com/lvsd/lvsd/nat"
)

// restore creates the conntrack entries of the FULLNAT connections to vips
// that the sync daemon brought into the IPVS connection table, before a
// takeover adds the VIPs' addresses (nat/conntrack.go says why). rs is the
// ruleset in force: it says which VIPs are FULLNAT, with which ct mark and
// SNAT range, exactly as the old owner's kernel applied it.
//
// A failed restore is reported but the takeover goes on: the VIP must move
// whatever happens, and connections without an entry are no worse off than
// without a restore.
func (k Kernel) restore(ctx context.Context, rs nat.Ruleset, vips []netip.Addr) error {
	if k.Conntrack == nil || k.Conns == nil {
		return nil
	}
	start := time.Now()
	conns, err := k.Conns.Connections(ctx)
	if err != nil {
		return fmt.Errorf("cannot restore FULLNAT connections of %v: reading the IPVS connection table: %w", vips, err)
	}
	entries, skipped := restoreEntries(rs, conns, vips)
	res, err := k.Conntrack.RestoreConntrack(ctx, entries)
	level := slog.LevelInfo
	if len(entries)+skipped == 0 {
		level = slog.LevelDebug // a cold start adds every VIP
	}
	k.log().Log(ctx, level, "restored FULLNAT conntrack entries before taking the addresses", "vips", vips,
		"connections", len(entries), "created", res.Created, "existing", res.Existing, "failed", res.Failed,
		"skipped", skipped, "duration", time.Since(start).Round(time.Microsecond).String())
	if err != nil {
		return fmt.Errorf("restoring FULLNAT conntrack entries of %v (%d failed; those connections may be reset): %w", vips, res.Failed, err)
	}
	return nil
}

// restoreEntries picks from conns the connections to vips that a FULLNAT
// rule of rs covers, as conntrack entries; skipped counts those that cannot
// carry data any more. Pure.
func restoreEntries(rs nat.Ruleset, conns []ipvs.Connection, vips []netip.Addr) (entries []nat.ConntrackEntry, skipped int) {
	want := make(map[netip.Addr]bool, len(vips))
	for _, v := range vips {
		want[v] = true
	}
	for _, c := range conns {
		if !want[c.Virtual.Addr().Unmap()] {
			continue
		}
		e, ok := rs.FullNATEntry(l4.Protocol(c.Protocol), c.Client, c.Virtual, c.Dest)
		if !ok {
			continue // another service on the VIP, or a persistence template
		}
		if !restorable(c) {
			skipped++
			continue
		}
		e.Timeout = c.Expires
		entries = append(entries, e)
	}
	return entries, skipped
}

// restorable says whether a connection can still carry data both ways:
// TCP until one side's FIN is answered (IPVS's states, ip_vs_proto_tcp.c),
// UDP always. A handshake in progress is left to the client's retransmitted
// SYN, a closing one to its timers.
func restorable(c ipvs.Connection) bool {
	switch c.Protocol {
	case l4.TCP:
		return c.State == "ESTABLISHED" || c.State == "FIN_WAIT" || c.State == "CLOSE_WAIT"
	case l4.UDP:
		return true
	}
	return false
}

func (k Kernel) log() *slog.Logger {
	if k.Log == nil {
		return slog.New(slog.DiscardHandler)
	}
	return k.Log
}
