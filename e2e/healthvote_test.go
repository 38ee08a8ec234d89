//go:build e2e

package e2e

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/lvsd/lvsd/e2e/topo"
)

// TestHealthVoteOneDissenter: two ECMP directors, and the health checks of
// one of them reach no backend. That one cannot outvote the other (a tie
// keeps a backend in, and a director that alone sees every backend down
// does not count; docs/ecmp.md, "Health agreement"): both keep every
// backend in their tables and the router keeps both paths, and each says
// why. When the other's checks fail too, the backends are down for both
// and the policy for none healthy applies on both; reachable again, they
// are healthy on both.
func TestHealthVoteOneDissenter(t *testing.T) {
	l := newECMPLab(t, ecmpOptions{directors: 2})
	l.start("director", "director2")
	other, dissenter := l.ds["director"], l.ds["director2"]
	rs1, rs2 := l.tp.RS(1).V4, l.tp.RS(2).V4
	marks := map[string]int{}
	for id, d := range l.ds {
		marks[id] = d.logSize()
		writeAtomic(t, d.dir+"/services.d/dr.yaml", fmt.Sprintf(
			"service: dr\nvip: %s\nports: [80, %d, %d]\nhealth: {interval: 500ms, timeout: 400ms, rise: 2, fall: 2, checks: [{type: tcp, port: 80}]}\n"+
				"backends:\n  - {address: %s}\n  - {address: %s}\n",
			ecmpVIP, survEcho, survTick, rs1, rs2))
		d.hup()
	}
	// The checks leave the director for the backends' addresses; the
	// forwarded flows (DR) leave for the VIP, and are not touched.
	block := func(h *topo.Host) {
		runInput(t, h, fmt.Sprintf("table ip e2e_block {\n chain out {\n  type filter hook output priority 0;\n"+
			"  ip daddr { %s, %s } tcp dport 80 drop\n }\n}\n", rs1, rs2), "nft", "-f", "-")
	}
	unblock := func(h *topo.Host) { runInput(t, h, "", "nft", "delete", "table", "ip", "e2e_block") }

	block(dissenter.host)
	dissenter.waitLog(marks["director2"], 20*time.Second, "this director's checks alone see every backend down")
	other.waitLog(marks["director"], 20*time.Second, "a director's checks alone see every backend down", "peer=director2")
	// Hold a while (many check rounds and heartbeats): the dissenter must
	// not take a backend out, on either director, nor withdraw a path.
	prefix := netip.PrefixFrom(ecmpVIP, 32)
	for end := time.Now().Add(5 * time.Second); time.Now().Before(end); time.Sleep(250 * time.Millisecond) {
		if paths, err := l.tp.Router().Nexthops(prefix); err != nil || len(paths) != 2 {
			t.Fatalf("with one dissenting director the router routes the VIP via %v (%v), want both directors", paths, err)
		}
	}
	for id, d := range l.ds {
		tab := kernelDestinations(t, d.host, netip.AddrPortFrom(ecmpVIP, 80))
		if strings.Count(tab, " weight ") != 2 || strings.Contains(tab, "weight 0") {
			t.Errorf("%s's table with one dissenting director:\n%s\nwant both backends in", id, tab)
		}
		if log := d.logSince(marks[id]); strings.Contains(log, "op=withdraw-route") || strings.Contains(log, "none healthy") {
			t.Errorf("%s took the backends out or withdrew its route for one dissenting director:\n%s", id, log)
		}
	}

	// Down for both: a majority, and no director left out; the service's
	// policy for none healthy (here: all backends) applies on both.
	for id, d := range l.ds {
		marks[id] = d.logSize()
	}
	block(other.host)
	for id, d := range l.ds {
		d.waitLog(marks[id], 20*time.Second, "none healthy, so all backends")
	}
	for id, d := range l.ds {
		marks[id] = d.logSize()
	}
	unblock(other.host)
	unblock(dissenter.host)
	for id, d := range l.ds {
		d.waitLog(marks[id], 20*time.Second, "all healthy backends", "count=2")
	}
	l.waitPaths(2, 10*time.Second)
}
