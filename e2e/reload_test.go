//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"net/netip"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lvsd/lvsd/e2e/echo"
	"github.com/lvsd/lvsd/e2e/topo"
)

// TestHotReload: a running agent applies an edited service file as the
// smallest change: adding a backend (SIGHUP) is one add-destination and one
// new `ipvsadm -Sn` line; changing a weight (SIGHUP, then once more by only
// editing the file, picked up by the 5 s poll) is one update-destination
// and one changed line; a reload of an unchanged configuration applies
// nothing. A long-lived TCP connection through the VIP keeps echoing from
// the same server after every step.
func TestHotReload(t *testing.T) {
	tp := topo.New(t, topo.WithRealServers(3), topo.WithClientSources(4))
	vip := netip.MustParseAddr("10.0.0.50")
	rss := tp.RealServers()
	holdVIPOnLoopback(t, vip, rss...)
	serveEcho(t, echo.Config{TCP: []uint16{80}}, rss...)
	director := tp.Director(1)

	// weights[i] is the weight of rs(i+1); 0 leaves it out of the file.
	weights := []int{1, 1, 0}
	service := func() string {
		var b strings.Builder
		fmt.Fprintf(&b, "service: web\nvip: %s\nports: [80]\nforwarding: dr\nbackends:\n", vip)
		for i, w := range weights {
			if w > 0 {
				fmt.Fprintf(&b, "  - {address: %s, weight: %d}\n", rss[i].V4, w)
			}
		}
		return b.String()
	}
	d := newDirector(t, director, map[string]string{"web": service()})
	file := filepath.Join(d.dir, "services.d", "web.yaml")
	d.start()
	d.waitServices(1, 2)
	// waitServices may return before the first reconcile has ended (the VIP
	// and its log lines come after the destinations).
	d.waitLog(0, 10*time.Second, "msg=reconciled")

	ctx := context.Background()
	conn, err := echo.Connect(ctx, tp.Client(), tp.ClientSources(false)[0], netip.AddrPortFrom(vip, 80))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	t.Logf("long-lived connection from %s is on %s", conn.Hello.Peer, conn.Hello.Name)
	stillEchoes := func(step string) {
		t.Helper()
		if err := conn.Echo(ctx, step); err != nil {
			t.Fatalf("after %s the long-lived connection broke: %v", step, err)
		}
	}
	stillEchoes("start")

	// Each step's log window starts where the previous one ended, so an op
	// logged late is still counted (against the next step).
	mark := d.logSize()
	before := ipvsSave(t, director)
	// step checks that the ops applied since the previous step are exactly
	// want (op kinds, each line also containing the given object), and that
	// `ipvsadm -Sn` changed by exactly the added and removed lines.
	step := func(name string, wantOps [][2]string, wantAdded, wantRemoved []string) {
		t.Helper()
		text := d.logSince(mark)
		mark += len(text)
		ops := appliedOps(text)
		ok := len(ops) == len(wantOps)
		for i := 0; ok && i < len(ops); i++ {
			ok = ops[i].Kind == wantOps[i][0] && strings.Contains(ops[i].Line, wantOps[i][1])
		}
		if !ok {
			t.Errorf("%s: lvsd applied\n%s\nwant exactly %v", name, formatOps(ops), wantOps)
		}
		after := ipvsSave(t, director)
		added, removed := lineDiff(before, after)
		if !slices.Equal(added, wantAdded) || !slices.Equal(removed, wantRemoved) {
			t.Errorf("%s: ipvsadm -Sn gained %q and lost %q, want gained %q and lost %q\nbefore:\n%s\nafter:\n%s",
				name, added, removed, wantAdded, wantRemoved, before, after)
		}
		before = after
		stillEchoes(name)
	}
	dest := func(i, w int) string { return fmt.Sprintf("-a -t %s:80 -r %s:80 -g -w %d", vip, rss[i].V4, w) }

	// (a) add rs3, SIGHUP.
	weights[2] = 1
	writeAtomic(t, file, service())
	d.hup()
	d.waitLog(mark, 10*time.Second, "msg=reconciled")
	step("adding rs3 (SIGHUP)", [][2]string{{"add-destination", rss[2].V4.String() + ":80"}}, []string{dest(2, 1)}, nil)

	// (b) change the weight of the server that holds the connection, SIGHUP:
	// its established connection is not affected.
	held := slices.IndexFunc(rss, func(h *topo.Host) bool { return h.ID == conn.Hello.Name })
	if held < 0 {
		t.Fatalf("the connection was greeted by %q, not a real server", conn.Hello.Name)
	}
	heldAddr := rss[held].V4.String() + ":80"
	weights[held] = 2
	writeAtomic(t, file, service())
	d.hup()
	d.waitLog(mark, 10*time.Second, "msg=reconciled")
	step("weight 1→2 (SIGHUP)", [][2]string{{"update-destination", heldAddr}}, []string{dest(held, 2)}, []string{dest(held, 1)})

	// (c) the same kind of edit without a signal: the poll (every 5 s) must
	// notice it. The file keeps its size; only its contents and mtime change.
	weights[held] = 3
	edited := time.Now()
	writeAtomic(t, file, service())
	d.waitLog(mark, 8*time.Second, "configuration reloaded", `trigger="file change"`)
	took := time.Since(edited)
	t.Logf("the edit without a signal was picked up after %v", took.Round(10*time.Millisecond))
	if took > 6*time.Second {
		t.Errorf("the edit was picked up after %v, want within 6 s (5 s poll)", took)
	}
	d.waitLog(mark, 10*time.Second, "msg=reconciled")
	step("weight 2→3 (file edit only)", [][2]string{{"update-destination", heldAddr}}, []string{dest(held, 3)}, []string{dest(held, 2)})

	// A reload with nothing changed applies nothing (two barriers: the
	// second one waits for the reconcile that follows the first reload).
	d.barrier()
	d.barrier()
	step("reload without changes", nil, nil, nil)
}
