//go:build e2e

package e2e

import (
	"net/netip"
	"testing"
	"time"
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
	conns := openTOAConns(t, l.tp.Client(), srcs[:30], dst)
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
	keptClientAddresses(t, conns, "the loss of "+cut.ID)
	newClientAddresses(t, l.tp.Client(), srcs[30:45], dst, "the loss of "+cut.ID)
}
