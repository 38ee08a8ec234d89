//go:build e2e

package e2e

import (
	"fmt"
	"net/netip"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lvsd/lvsd/e2e/echo"
	"github.com/lvsd/lvsd/e2e/topo"
)

// TestFullNATClientAddressFailover: a FULLNAT service with client_address
// toa on two directors (active-standby, connection sync on) to real
// servers whose lvsd restores the client's address. 20 connections are
// opened through the first director, each seeing its client's address and
// port; the first director's link is cut; on the second, every connection
// goes on and getpeername() still gives its client (the address was read
// from the SYN, so it lives with the socket), and new connections through
// the second director carry the client's address too (its program was on
// its interface all along, VIP or not).
func TestFullNATClientAddressFailover(t *testing.T) {
	tp := topo.New(t, topo.WithDirectors(2), topo.WithClientSources(30))
	systemBPFFS(t)
	vip := netip.MustParseAddr("10.0.0.52")
	dst := netip.AddrPortFrom(vip, 80)
	snat := []string{"10.0.0.70", "10.0.0.71"}
	rss := tp.RealServers()
	echoes := serveEcho(t, echo.Config{TCP: []uint16{80}}, rss...)

	var backends []string
	for _, rs := range rss {
		backends = append(backends, strconv.Quote(netip.AddrPortFrom(rs.V4, 80).String()))
	}
	rsAgent := newRealServer(t, tp.RS(1), fmt.Sprintf("  client_address:\n    mode: toa\n    directors: [%q, %q]\n    backends: [%s]\n    cgroup: %s\n",
		snat[0], snat[1], strings.Join(backends, ", "), ownCgroup(t)))
	rsAgent.start()
	rsAgent.waitReady(0)
	rsAgent.waitLog(0, 15*time.Second, "op=toa-attach")
	for _, e := range echoes { // listeners keep their SYNs only when opened after the programs
		if err := e.Stop(echo.TCP, 80); err != nil {
			t.Fatal(err)
		}
		if err := e.Start(echo.TCP, 80); err != nil {
			t.Fatal(err)
		}
	}

	key := clusterKey(t)
	var ds []*lvsd
	for i, d := range tp.Directors() {
		l := newClusterDirector(t, tp, d, key, fmt.Sprintf("  priority: %d\n", 250-50*i))
		writeFile(t, filepath.Join(l.dir, "services.d", "web.yaml"), fmt.Sprintf(
			"service: web\nvip: %s\nports: [80]\nforwarding: fullnat\nfullnat: {source_addresses: [%s, %s]}\nclient_address: toa\n"+
				"backends:\n  - {address: %s}\n  - {address: %s}\n", vip, snat[0], snat[1], tp.RS(1).V4, tp.RS(2).V4))
		l.start()
		ds = append(ds, l)
	}
	for _, l := range ds {
		l.waitLog(0, 30*time.Second, "op=toa-attach")
	}
	if h := settle(t, tp, vip, 2*time.Second, 30*time.Second); h != tp.Director(1).ID {
		t.Fatalf("%s settled on %s, want %s", vip, h, tp.Director(1).ID)
	}

	srcs := tp.ClientSources(false)
	conns := openTOAConns(t, tp.Client(), srcs[:20], dst)
	time.Sleep(time.Second) // the sync daemons' batch

	if err := tp.Director(1).SetPort(false); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tp.Director(1).SetPort(true) })
	waitHolders(t, tp, vip, 15*time.Second, onlyOn(tp.Director(2).ID))
	keptClientAddresses(t, conns, "the failover")
	newClientAddresses(t, tp.Client(), srcs[20:30], dst, "the failover, through "+tp.Director(2).ID)
	if st := statusPart[toaStatus](t, tp.Director(2), "toa"); st.Added == 0 {
		t.Errorf("%s's TOA counters %+v: want options added", tp.Director(2).ID, st)
	}
}
