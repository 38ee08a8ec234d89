//go:build e2e

package e2e

import (
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

// TestResetInCluster: two directors with connection sync, a UDP service
// (UDP connections never persist on an unhealthy backend). A UDP flow runs
// through the owner to rs1 and is synced to the standby. rs1 fails its
// check: both directors drop the flow's entry, and the owner's relay stops
// replaying it, so after a few resync intervals the standby still has no
// entry bound to rs1. Then the owner is cut off: the flow's next datagram,
// through the new owner, is answered by rs2, not by the unhealthy rs1.
func TestResetInCluster(t *testing.T) {
	vip := netip.MustParseAddr("10.0.0.50")
	tp := topo.New(t, topo.WithDirectors(2), topo.WithClientSources(24))
	rs1, rs2 := tp.RS(1), tp.RS(2)
	holdVIPOnLoopback(t, vip, rs1, rs2)
	servers := serveEcho(t, echo.Config{UDP: []uint16{82}, HTTP: []uint16{8080}}, rs1, rs2)
	key := clusterKey(t)
	service := fmt.Sprintf("service: dns\nvip: %s\nprotocol: udp\nports: [82]\n%sbackends:\n%s",
		vip, healthBlock(), backendsYAML([]*topo.Host{rs1, rs2}))
	var ds []*lvsd
	for i, h := range tp.Directors() {
		l := newClusterDirector(t, tp, h, key, fmt.Sprintf("  priority: %d\n  conn_sync: {resync_interval: 1s}\n", 250-50*i))
		writeFile(t, filepath.Join(l.dir, "services.d", "dns.yaml"), service)
		l.start()
		ds = append(ds, l)
	}
	owner, standby := tp.Director(1), tp.Director(2)
	waitHolders(t, tp, vip, 30*time.Second, onlyOn(owner.ID))

	flow := udpFlowTo(t, tp, netip.AddrPortFrom(vip, 82), "rs1")
	src := flow.LocalAddr().String()
	bound := func(h *topo.Host, rs *topo.Host) bool {
		for _, line := range strings.Split(ipvsConns(t, h), "\n") {
			if strings.Contains(line, src) && strings.Contains(line, rs.V4.String()+":82") {
				return true
			}
		}
		return false
	}
	waitFor(t, 10*time.Second, "the flow synced to the standby", func() bool {
		if _, err := flow.ask(); err != nil {
			t.Fatal(err)
		}
		return bound(standby, rs1)
	})

	offs := []int{ds[0].logSize(), ds[1].logSize()}
	servers["rs1"].SetHealthy(false)
	for i, l := range ds {
		l.waitLog(offs[i], 10*time.Second, "event=reset", "service=dns")
	}
	// Quiet flow, several resync intervals: a replayed copy would be back by now.
	time.Sleep(3500 * time.Millisecond)
	if bound(standby, rs1) || bound(owner, rs1) {
		t.Fatalf("after the reset and 3 resyncs the flow is still bound to rs1:\nowner:\n%s\nstandby:\n%s",
			ipvsConns(t, owner), ipvsConns(t, standby))
	}

	if err := owner.SetPort(false); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = owner.SetPort(true) })
	// The cut-off owner keeps the VIP (it sees no peer); what matters is that
	// the standby took it over on the client's side of the switch.
	waitHolders(t, tp, vip, 5*time.Second, func(h []string) bool { return slices.Contains(h, standby.ID) })
	var name string
	waitFor(t, 5*time.Second, "the flow answered through the new owner", func() bool {
		var err error
		name, err = flow.ask()
		return err == nil
	})
	if name != "rs2" {
		t.Errorf("after the failover the flow reached %s, want rs2 (rs1 is unhealthy)", name)
	}
	t.Logf("reset on both directors, nothing replayed; after the failover the flow reached %s", name)
}
