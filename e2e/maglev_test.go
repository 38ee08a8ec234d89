//go:build e2e

package e2e

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"github.com/lvsd/lvsd/e2e/echo"
	"github.com/lvsd/lvsd/e2e/topo"
)

// TestMaglevMatchesIpvsadm: the Maglev table lvsd builds must equal that of
// a service made by hand with ipvsadm from the same destinations, weights and
// order: every client address reaches the same real server through both.
// That is what lets every director of a cluster choose alike.
func TestMaglevMatchesIpvsadm(t *testing.T) {
	tp := topo.New(t, topo.WithRealServers(4), topo.WithClientSources(64))
	vipLVSD, vipRef := netip.MustParseAddr("10.0.0.50"), netip.MustParseAddr("10.0.0.60")
	rss := tp.RealServers()
	holdVIPOnLoopback(t, vipLVSD, rss...)
	holdVIPOnLoopback(t, vipRef, rss...)
	serveEcho(t, echo.Config{TCP: []uint16{80}}, rss...)
	weights := []int{1, 2, 1, 3}

	var backends strings.Builder
	restore := fmt.Sprintf("-A -t %s:80 -s mh -b mh-fallback\n", vipRef)
	for i, rs := range rss { // canonical order: by address, as lvsd adds them
		fmt.Fprintf(&backends, "  - {address: %s, weight: %d}\n", rs.V4, weights[i])
		restore += fmt.Sprintf("-a -t %s:80 -r %s:80 -g -w %d\n", vipRef, rs.V4, weights[i])
	}
	director := tp.Director(1)
	d := newDirector(t, director, map[string]string{"web": fmt.Sprintf(
		"service: web\nvip: %s\nports: [80]\naffinity: client-ip\nbackends:\n%s", vipLVSD, backends.String())})
	d.start()
	d.waitServices(1, 4)
	cmd := director.Exec(t.Context(), "ipvsadm", "-R")
	cmd.Stdin = strings.NewReader(restore)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("ipvsadm -R: %v: %s", err, out)
	}
	if err := director.AddAddr(netip.PrefixFrom(vipRef, 32), director.Link); err != nil {
		t.Fatal(err)
	}

	sources := tp.ClientSources(false)
	viaLVSD := ask(t, tp.Client(), sources, netip.AddrPortFrom(vipLVSD, 80), echo.TCP, 1)
	viaRef := ask(t, tp.Client(), sources, netip.AddrPortFrom(vipRef, 80), echo.TCP, 1)
	ref := map[netip.Addr]string{}
	for _, r := range viaRef {
		if r.err != nil {
			t.Fatalf("reference service, from %s: %v", r.src, r.err)
		}
		ref[r.src] = r.reply.Name
	}
	differ := 0
	for _, r := range viaLVSD {
		if r.err != nil {
			t.Fatalf("lvsd service, from %s: %v", r.src, r.err)
		}
		if ref[r.src] != r.reply.Name {
			differ++
			t.Errorf("source %s: lvsd's service chose %s, ipvsadm's %s", r.src, r.reply.Name, ref[r.src])
		}
	}
	t.Logf("%d sources, %d differ; lvsd: %s; ipvsadm: %s", len(sources), differ,
		formatDistribution(distribution(viaLVSD)), formatDistribution(distribution(viaRef)))
}
