//go:build e2e

package e2e

import (
	"net/netip"
	"testing"
	"time"

	"github.com/lvsd/lvsd/e2e/echo"
)

// clientAddress: TOA under ECMP (TestECMPFullNAT's services say
// client_address toa; the real servers' lvsd accepts the option from every
// director's source address). 30 connections spread over the running
// directors by the router's hash see their clients' addresses; director2 is
// cut, the router moves its flows to the survivors, which carry them on
// from the synced state (and take over its source address); every
// connection goes on, getpeername() still giving its client, and new
// connections through the survivors carry their clients' addresses too.
func (l *ecmpLab) clientAddress(t *testing.T) {
	running := l.running()
	dst := netip.AddrPortFrom(ecmpVIP, survEcho)
	srcs := l.tp.ClientSources(false)
	type opened struct {
		c     *echo.Conn
		local netip.AddrPort
	}
	var conns []opened
	for _, src := range srcs[:30] {
		c, err := echo.Connect(t.Context(), l.tp.Client(), src, dst)
		if err != nil {
			t.Fatalf("from %s: %v", src, err)
		}
		t.Cleanup(func() { c.Close() })
		local := netip.MustParseAddrPort(c.LocalAddr().String())
		if c.Hello.PeerName != local || c.Hello.Peer != local {
			t.Errorf("%s via %s: accept %s, getpeername %s; want the client's %s", src, c.Hello.Name, c.Hello.Peer, c.Hello.PeerName, local)
		}
		if err := c.Echo(t.Context(), "before"); err != nil {
			t.Fatal(err)
		}
		conns = append(conns, opened{c, local})
	}
	l.waitSynced(t, len(conns), 30*time.Second)
	// The directors' namespaces share the VM's BPF file system, so one
	// set of pinned maps and counters: their total, not each one's.
	t.Logf("TOA options added before the cut: %d", statusPart[toaStatus](t, l.tp.Director(1), "toa").Added)

	cut := l.tp.Director(2)
	if err := cut.SetPort(false); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cut.SetPort(true) })
	l.waitPaths(running-1, 30*time.Second)
	kept := 0
	for _, o := range conns {
		got, err := o.c.PeerName(t.Context())
		switch {
		case err != nil:
			t.Errorf("connection from %s after %s was cut: %v", o.local, cut.ID, err)
		case got != o.local:
			t.Errorf("connection from %s after %s was cut: getpeername %s", o.local, cut.ID, got)
		default:
			kept++
		}
	}
	t.Logf("%d of %d connections kept the client's address through the loss of %s", kept, len(conns), cut.ID)
	for _, src := range srcs[30:45] {
		r, local, err := askTracked(t.Context(), l.tp.Client(), src, dst)
		if err != nil {
			t.Errorf("new connection from %s after the cut: %v", src, err)
			continue
		}
		if r.Peer != local || r.PeerName != local {
			t.Errorf("new connection from %s after the cut: accept %s, getpeername %s; want the client's %s", src, r.Peer, r.PeerName, local)
		}
	}
}
