//go:build e2e

package e2e

import (
	"context"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lvsd/lvsd/e2e/topo"
)

// TestFailback: a FULLNAT VIP moves to the standby and back within two
// seconds while 200 long-lived connections exchange through it — what a
// director declared failed by mistake (its agent stalled past the failure
// timeout) goes through. The owner's agent is stopped (SIGSTOP) until the
// standby has taken the VIP, then the traffic runs a second through the
// standby and the agent continues: it takes the VIP back (the higher
// priority). Every connection must survive, the ones the standby carried
// meanwhile included: the owner still holds its conntrack entries from
// before, which never saw what the real servers sent meanwhile, and
// window tracking would take the clients' next acknowledgements as
// invalid (the packet then leaves untranslated and the server resets it).
func TestFailback(t *testing.T) {
	fdLimit(t, 4096)
	tp := topo.New(t, topo.WithDirectors(2), topo.WithClientSources(4))
	modes := survModes(tp)[2:3] // FULLNAT
	m := modes[0]
	setupSurvivalServers(t, tp, modes, survInterval)
	ds := startSurvivalDirectors(t, tp, modes, true)
	owner, next := tp.Director(1), tp.Director(2)

	f := newFleet(t, tp.Client(), m.src, m.vip, survEcho, survTick, survInterval)
	start := time.Now()
	if err := f.open(survOld+survYoung, false); err != nil {
		t.Fatal(err)
	}
	if broken, waiting := f.waitExchanged(start, 10*time.Second); len(broken) > 0 || waiting > 0 {
		t.Fatalf("before the move: %d broke, %d did not exchange: %s", len(broken), waiting, strings.Join(broken, "\n"))
	}
	time.Sleep(2 * time.Second)

	cut := time.Now()
	if err := ds[0].cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stopped := true
	resume := func() {
		if stopped {
			_ = ds[0].cmd.Process.Signal(syscall.SIGCONT)
			stopped = false
		}
	}
	t.Cleanup(resume)
	waitHolders(t, tp, m.vip, 10*time.Second, func(h []string) bool { return slices.Contains(h, next.ID) })
	if _, ok := waitNeighbour(t, tp.Client(), next, m.vip, 5*time.Second, true); !ok {
		t.Fatalf("the client's neighbour entry for %s did not move to %s", m.vip, next.ID)
	}
	moved := time.Since(cut)
	time.Sleep(time.Second) // the standby carries the traffic
	resume()
	back := time.Now()
	waitHolders(t, tp, m.vip, 10*time.Second, onlyOn(owner.ID))
	if _, ok := waitNeighbour(t, tp.Client(), owner, m.vip, 5*time.Second, true); !ok {
		t.Fatalf("the client's neighbour entry for %s did not come back to %s", m.vip, owner.ID)
	}
	returned := time.Since(back)
	end := time.Now().Add(6 * time.Second)
	time.Sleep(time.Until(end))
	f.stop(t, end)
	row := f.analyse(cut, end)
	t.Logf("FULLNAT: standby took the VIP %v after the stop, the owner had it back %v after it continued; %d/%d survived, longest stall %v\n%s",
		moved.Round(time.Millisecond), returned.Round(time.Millisecond), row.survived, row.total, row.longest.Round(time.Millisecond),
		strings.Join(row.failures, "\n"))
	if row.survived != row.total {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		t.Errorf("%d of %d connections broke in the move and back; %s's entries: %s", row.total-row.survived, row.total,
			owner.ID, conntrackCensus(ctx, owner, m.vip.String(), 8))
	}
}
