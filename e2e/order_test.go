//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/lvsd/lvsd/e2e/echo"
	"github.com/lvsd/lvsd/e2e/topo"
)

// TestCanonicalOrder: a backend added between two others goes to the head
// of the kernel's list (the kernel adds there), where a director that made
// the service now has it in the middle: their Maglev tables would differ.
// lvsd moves the backend after it (a delete and an add, with
// expire_nodest_conn held at 0 between them), so the list is the one every
// director builds, and that backend's established connection goes on: the
// add takes the destination back from the kernel's trash with its entry.
func TestCanonicalOrder(t *testing.T) {
	tp := topo.New(t, topo.WithClientSources(24), topo.WithRealServers(3))
	vip := netip.MustParseAddr("10.0.0.50")
	rs1, rs2, rs3 := tp.RS(1), tp.RS(2), tp.RS(3)
	holdVIPOnLoopback(t, vip, rs1, rs2, rs3)
	serveEcho(t, echo.Config{TCP: []uint16{80}}, rs1, rs2, rs3)
	service := func(hosts ...*topo.Host) string {
		return fmt.Sprintf("service: web\nvip: %s\nports: [80]\nbackends:\n%s", vip, backendsYAML(hosts))
	}
	d := newDirector(t, tp.Director(1), map[string]string{"web": service(rs1, rs3)})
	d.start()
	d.waitServices(1, 2)
	conn := connectTo(t, tp, netip.AddrPortFrom(vip, 80), "rs3")

	mark := d.logSize()
	writeAtomic(t, d.dir+"/services.d/web.yaml", service(rs1, rs2, rs3))
	d.hup()
	// Head first: the reverse of the sorted backends.
	want := "10.0.0.13:80 route weight 1\n10.0.0.12:80 route weight 1\n10.0.0.11:80 route weight 1"
	var got string
	if !eventually(15*time.Second, func() bool { got = kernelDestinations(t, d.host, netip.AddrPortFrom(vip, 80)); return got == want }) {
		t.Fatalf("the kernel's list:\n%s\nwant, as a director that makes the service now has it:\n%s\nlog:\n%s", got, want, d.logSince(mark))
	}
	log := d.logSince(mark)
	if !strings.Contains(log, "op=move-destination") || !strings.Contains(log, "10.0.0.13:80") {
		t.Errorf("no move of rs3 in the log:\n%s", log)
	}
	table := run(t, d.host, "ipvsadm", "-Ln", "-t", "10.0.0.50:80")
	active := ""
	for _, line := range strings.Split(table, "\n") {
		if f := strings.Fields(line); len(f) >= 5 && f[1] == "10.0.0.13:80" {
			active = f[4]
		}
	}
	if active != "1" {
		t.Errorf("rs3 has %q active connections after the move, want its 1:\n%s", active, table)
	}
	if err := conn.Echo(context.Background(), "after the move"); err != nil {
		t.Errorf("the connection to rs3 broke when rs3 was moved: %v", err)
	}
	if sysctl := run(t, d.host, "sysctl", "-n", "net.ipv4.vs.expire_nodest_conn"); strings.TrimSpace(sysctl) != "1" {
		t.Errorf("expire_nodest_conn is %q after the move, want 1", sysctl)
	}
}
