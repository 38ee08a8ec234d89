//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lvsd/lvsd/e2e/echo"
	"github.com/lvsd/lvsd/e2e/topo"
	"github.com/lvsd/lvsd/ipvs"
	"github.com/lvsd/lvsd/ipvs/l4"
)

// TestAffinity: with `affinity: none` lvsd sets the Maglev flag mh-port, so
// the connections of ONE client address (differing only in source port) are
// spread over both real servers; after a reload to `affinity: client-ip` the
// flag is gone (one update-service, nothing else) and every connection of a
// client address reaches the same server, while different addresses still
// use both.
func TestAffinity(t *testing.T) {
	tp := topo.New(t, topo.WithClientSources(24))
	vip := netip.MustParseAddr("10.0.0.50")
	rs1, rs2 := tp.RS(1), tp.RS(2)
	holdVIPOnLoopback(t, vip, rs1, rs2)
	serveEcho(t, echo.Config{TCP: []uint16{80}}, rs1, rs2)
	service := func(affinity string) string {
		return fmt.Sprintf("service: web\nvip: %s\nports: [80]\nforwarding: dr\naffinity: %s\nbackends:\n  - {address: %s}\n  - {address: %s}\n",
			vip, affinity, rs1.V4, rs2.V4)
	}
	director := tp.Director(1)
	d := newDirector(t, director, map[string]string{"web": service("none")})
	d.start()
	d.waitServices(1, 2)
	d.waitLog(0, 10*time.Second, "msg=reconciled") // the first reconcile is over
	k := d.ipvs()
	key := ipvs.ServiceKey{Protocol: l4.TCP, Addr: vip, Port: 80}
	dst := netip.AddrPortFrom(vip, 80)
	sources := tp.ClientSources(false)

	// affinity none: mh-port in the kernel, and one address is spread.
	if got, want := serviceFlags(t, k, key), ipvs.FlagMHFallback|ipvs.FlagMHPort; got != want {
		t.Errorf("affinity none: kernel flags of %s are %q, want %q", key, got, want)
	}
	if table := run(t, director, "ipvsadm", "-Ln"); !strings.Contains(table, "mh (mh-fallback,mh-port)") {
		t.Errorf("affinity none: ipvsadm -Ln does not show mh (mh-fallback,mh-port):\n%s", table)
	}
	// Sequential connections from one address get fresh source ports; with
	// the port in the hash, 40 of them all landing on one of two servers
	// has odds of 2^-39.
	spread := ask(t, tp.Client(), sources[:1], dst, echo.TCP, 40)
	checkReplies(t, spread, vip)
	dist := distribution(spread)
	t.Logf("affinity none, 40 connections from %s: %s", sources[0], formatDistribution(dist))
	if dist["rs1"] == 0 || dist["rs2"] == 0 {
		t.Errorf("affinity none: 40 connections from %s all went to one server (%s); mh-port should spread them",
			sources[0], formatDistribution(dist))
	}

	// Reload to client-ip: the service is updated in place.
	off := d.logSize()
	writeAtomic(t, filepath.Join(d.dir, "services.d", "web.yaml"), service("client-ip"))
	d.hup()
	d.waitLog(off, 10*time.Second, "msg=reconciled")
	if ops := appliedOps(d.logSince(off)); len(ops) != 1 || ops[0].Kind != "update-service" {
		t.Errorf("changing affinity applied\n%s\nwant exactly one update-service", formatOps(ops))
	}
	if got, want := serviceFlags(t, k, key), ipvs.FlagMHFallback; got != want {
		t.Errorf("affinity client-ip: kernel flags of %s are %q, want %q", key, got, want)
	}
	if table := run(t, director, "ipvsadm", "-Ln"); !strings.Contains(table, "mh (mh-fallback)") || strings.Contains(table, "mh-port") {
		t.Errorf("affinity client-ip: ipvsadm -Ln should show mh (mh-fallback) without mh-port:\n%s", table)
	}

	// A source not used above, so no IPVS connection entry of the first
	// phase can be reused for it.
	pinned := ask(t, tp.Client(), sources[1:2], dst, echo.TCP, 40)
	checkReplies(t, pinned, vip)
	dist = distribution(pinned)
	t.Logf("affinity client-ip, 40 connections from %s: %s", sources[1], formatDistribution(dist))
	if len(dist) != 1 || dist["error"] > 0 {
		t.Errorf("affinity client-ip: 40 connections from %s reached %s, want one server", sources[1], formatDistribution(dist))
	}
	// Pinning per address, not everything on one server: more addresses,
	// each pinned, both servers used.
	many := ask(t, tp.Client(), sources[2:], dst, echo.TCP, 3)
	checkReplies(t, many, vip)
	chosen := map[netip.Addr]string{}
	for _, r := range many {
		if r.err != nil {
			continue
		}
		if prev, ok := chosen[r.src]; ok && prev != r.reply.Name {
			t.Errorf("affinity client-ip: %s went to %s and to %s", r.src, prev, r.reply.Name)
		}
		chosen[r.src] = r.reply.Name
	}
	dist = distribution(many)
	t.Logf("affinity client-ip, %d addresses × 3: %s", len(sources[2:]), formatDistribution(dist))
	if dist["rs1"] == 0 || dist["rs2"] == 0 {
		t.Errorf("affinity client-ip: %d addresses all went to one server (%s)", len(sources[2:]), formatDistribution(dist))
	}
}

// serviceFlags reads the IPVS flags of one service from the kernel.
func serviceFlags(t *testing.T, k *ipvs.Kernel, key ipvs.ServiceKey) ipvs.Flags {
	t.Helper()
	svcs, err := k.Services(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range svcs {
		if s.ServiceKey == key {
			return s.Flags
		}
	}
	t.Fatalf("service %s is not in the kernel (have %v)", key, svcs)
	return 0
}

// checkReplies fails on errors and checks what a DR real server must see:
// the client's own address, and the VIP as its local address.
func checkReplies(t *testing.T, results []result, vip netip.Addr) {
	t.Helper()
	for _, r := range results {
		switch {
		case r.err != nil:
			t.Errorf("from %s: %v", r.src, r.err)
		case r.reply.Peer.Addr() != r.src:
			t.Errorf("%s saw peer %s, want the client's own address %s", r.reply.Name, r.reply.Peer, r.src)
		case r.reply.Local.Addr() != vip:
			t.Errorf("%s answered on %s, want the VIP %s", r.reply.Name, r.reply.Local, vip)
		}
	}
}
