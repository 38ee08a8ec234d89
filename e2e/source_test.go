//go:build e2e

package e2e

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/lvsd/lvsd/e2e/echo"
	"github.com/lvsd/lvsd/e2e/topo"
)

// TestVIPNeverASource: VIPs in the real servers' own prefix. fd00::10 shares
// a longer prefix with the real servers fd00::11 and fd00::12 than the
// director's fd00::2 does, so if the kernel could pick it (RFC 6724, longest
// match) the director's health checks would leave from the VIP, the real
// servers would answer their own VIP on lo, every check would time out and
// the service would run on its none-healthy fallback. lvsd adds VIPs with
// preferred lifetime 0: every backend must be seen healthy, IPv4 and IPv6,
// and the kernel must name the director's own address as the source.
func TestVIPNeverASource(t *testing.T) {
	tp := topo.New(t)
	vip4, vip6 := netip.MustParseAddr("10.0.0.10"), netip.MustParseAddr("fd00::10")
	rs1, rs2 := tp.RS(1), tp.RS(2)
	holdVIPOnLoopback(t, vip4, rs1, rs2)
	holdVIPOnLoopback(t, vip6, rs1, rs2)
	serveEcho(t, echo.Config{TCP: []uint16{80}, HTTP: []uint16{8080}}, rs1, rs2)
	service := func(name string, vip netip.Addr, v6 bool) string {
		return fmt.Sprintf("service: %s\nvip: %q\nports: [80]\nhealth:\n  interval: %s\n  timeout: 250ms\n  rise: 1\n  fall: 1\n"+
			"  checks: [{type: http, port: 8080, path: /healthz}]\nbackends:\n  - {address: %q}\n  - {address: %q}\n",
			name, vip, healthInterval, rs1.Addr(v6), rs2.Addr(v6))
	}
	d := newDirector(t, tp.Director(1), map[string]string{"web4": service("web4", vip4, false), "web6": service("web6", vip6, true)})
	d.start()
	d.waitServices(2, 2)
	for _, rs := range []*topo.Host{rs1, rs2} {
		for _, v6 := range []bool{false, true} {
			want := fmt.Sprintf("target=web%d/%s healthy=true", map[bool]int{false: 4, true: 6}[v6], rs.Addr(v6))
			waitFor(t, 10*time.Second, want, func() bool { return strings.Contains(d.log(), want) })
			route, err := tp.Director(1).Run(t.Context(), "ip", "route", "get", rs.Addr(v6).String())
			if err != nil {
				t.Fatal(err)
			}
			if own := tp.Director(1).Addr(v6).String(); !strings.Contains(route, "src "+own) {
				t.Errorf("ip route get %s on the director: %q, want src %s (not a VIP)", rs.Addr(v6), strings.TrimSpace(route), own)
			}
		}
	}
	if strings.Contains(d.log(), "healthy=false") || strings.Contains(d.log(), "none healthy") {
		t.Errorf("a backend was seen unhealthy:\n%s", d.log())
	}
}
