//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/lvsd/lvsd/cluster/connsync"
	"github.com/lvsd/lvsd/ipvs"
)

// joinBackupDelay is how late the joining director's backup daemon comes
// up: long after the others have replayed their connections to it (within
// a second of its start), well inside the relay's catch-up limit (15 s).
const joinBackupDelay = 6 * time.Second

// TestECMPJoinHasState: a director joins a FULLNAT ECMP group under a
// fleet of long-lived connections while its kernel's backup sync daemon is
// slow to start (LVSD_TEST_BACKUP_DAEMON_DELAY, a test knob that delays
// the daemon's start in the agent's first pass). The others' replays
// reach it before the daemon runs; it must hold them, write them once the
// daemon runs, and announce the VIP only once its IPVS connection table
// has them. So at the moment the router's route gets the joiner's path,
// the joiner's table holds an entry for every connection of the fleet,
// and every connection survives the re-hash.
func TestECMPJoinHasState(t *testing.T) {
	l := newECMPLab(t, ecmpOptions{directors: 4, sources: 200, sync: true, fullnat: true})
	l.start("director", "director2", "director3")
	joiner := l.ds["director4"]
	joiner.env = []string{"LVSD_TEST_BACKUP_DAEMON_DELAY=" + joinBackupDelay.String()}
	table := joiner.ipvs()
	type snapshot struct {
		entries int
		routed  time.Time
		err     error
	}
	seen := make(chan snapshot, 1)
	c := l.survive(t, func() {
		events, err := l.tp.Router().WatchRoute(t.Context(), netip.PrefixFrom(ecmpVIP, 32))
		if err != nil {
			t.Fatal(err)
		}
		joiner.start()
		go func() {
			for ev := range events {
				if len(ev.Nexthops) == 4 {
					n, err := fleetEntries(t.Context(), table)
					seen <- snapshot{n, ev.At, err}
					return
				}
			}
		}()
	}, 4)
	t.Logf("director join with a late backup daemon (director4, daemon %v late, %s, sync on): %s", joinBackupDelay, l.mode, c)
	var at snapshot
	select {
	case at = <-seen:
	case <-time.After(10 * time.Second):
		t.Fatal("the route watch did not see the joiner's path")
	}
	if at.err != nil {
		t.Fatal(at.err)
	}
	t.Logf("when the router's route got director4's path: director4's IPVS table had %d of the fleet's %d connections;\n%s",
		at.entries, c.row.total, joinLog(joiner))
	sync := statusPart[connsync.Stats](t, joiner.host, "conn_sync")
	t.Logf("director4's connection sync: %d received, %d applied, %d held before its backup daemon ran, %d confirmed in its table, "+
		"%d written again, %d unconfirmed", sync.ReceivedRecords, sync.AppliedRecords, sync.HeldMessages, sync.ConfirmedRecords,
		sync.RetriedRecords, sync.UnconfirmedRecords)
	if at.entries < c.row.total {
		t.Errorf("director4 was announced with %d of the fleet's %d connections in its IPVS table, want all", at.entries, c.row.total)
	}
	if c.row.survived != c.row.total {
		t.Errorf("%d/%d connections survived the join, want all", c.row.survived, c.row.total)
	}
	if len(c.failedAfter) > 0 {
		t.Errorf("%d new connections failed that started a second after the router's change", len(c.failedAfter))
	}
}

// fleetEntries counts the established entries of the fleet's connections
// (to the VIP's echo and tick ports) in a director's IPVS table.
func fleetEntries(ctx context.Context, k *ipvs.Kernel) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	n := 0
	err := k.EachConnection(ctx, func(c ipvs.Connection) {
		if c.Virtual.Addr() == ecmpVIP && (c.Virtual.Port() == survEcho || c.Virtual.Port() == survTick) && c.State == "ESTABLISHED" {
			n++
		}
	})
	return n, err
}

// joinLog is what the joiner logged about its start-up hold and the
// others' connection state.
func joinLog(d *lvsd) string {
	var b strings.Builder
	for _, line := range strings.Split(d.log(), "\n") {
		for _, want := range []string{"backup sync daemon", "connections are in the kernel", "still lacks", "connection state of the other directors",
			"start-up hold over", "start-daemon"} {
			if strings.Contains(line, want) {
				fmt.Fprintln(&b, line)
				break
			}
		}
	}
	return b.String()
}
