//go:build e2e

package e2e

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lvsd/lvsd/e2e/topo"
)

// TestForeignServicesUntouched: IPVS services, destinations, interface
// addresses and nftables tables that an operator made before lvsd started
// are left exactly as they were while lvsd programs its own service,
// reloads a changed configuration, drains and removes its service (even
// one on the same VIP as a foreign service) and stops.
func TestForeignServicesUntouched(t *testing.T) {
	tp := topo.New(t, topo.WithClientSources(0))
	director := tp.Director(1)
	vip := netip.MustParseAddr("10.0.0.50")

	// The operator's objects: a service of its own with a destination, a
	// service on lvsd's VIP but another port, an address for its VIP (and
	// an IPv6 one), and an nftables table.
	runInput(t, director, strings.Join([]string{
		"-A -t 10.0.0.60:80 -s rr",
		"-a -t 10.0.0.60:80 -r 10.0.0.11:80 -g -w 3",
		"-A -t 10.0.0.50:8080 -s wlc",
		"-a -t 10.0.0.50:8080 -r 10.0.0.12:8080 -m -w 2",
	}, "\n")+"\n", "ipvsadm", "-R")
	foreignAddrs := []netip.Prefix{netip.MustParsePrefix("10.0.0.60/32"), netip.MustParsePrefix("fd00::60/128")}
	for _, p := range foreignAddrs {
		if err := director.AddAddr(p, ""); err != nil {
			t.Fatal(err)
		}
	}
	runInput(t, director, "table inet operator {\n  chain input {\n    type filter hook input priority 0; policy accept;\n    tcp dport 22 counter accept\n  }\n}\n", "nft", "-f", "-")

	foreignLines := func(save string) []string {
		var out []string
		for _, l := range strings.Split(save, "\n") {
			if strings.Contains(l, "10.0.0.60:80 ") || strings.Contains(l, "10.0.0.50:8080 ") {
				out = append(out, l)
			}
		}
		return out
	}
	wantIPVS := foreignLines(ipvsSave(t, director))
	if len(wantIPVS) != 4 {
		t.Fatalf("setting up the foreign services: ipvsadm -Sn shows %q", wantIPVS)
	}
	wantNFT := run(t, director, "nft", "list", "table", "inet", "operator")
	check := func(when string) {
		t.Helper()
		save := ipvsSave(t, director)
		if got := foreignLines(save); !slices.Equal(got, wantIPVS) {
			t.Errorf("%s: the foreign IPVS lines are\n%s\nwant\n%s\nwhole table:\n%s", when,
				strings.Join(got, "\n"), strings.Join(wantIPVS, "\n"), save)
		}
		addrs := addrsOf(t, director)
		for _, p := range foreignAddrs {
			if !slices.Contains(addrs, p) {
				t.Errorf("%s: the foreign address %s is gone from %s: %v", when, p, director.Link, addrs)
			}
		}
		if got := run(t, director, "nft", "list", "table", "inet", "operator"); got != wantNFT {
			t.Errorf("%s: the foreign nftables table changed:\n%s\nwant\n%s", when, got, wantNFT)
		}
	}
	// checkOps fails if an op lvsd applied names a foreign object.
	checkOps := func(when, text string) {
		t.Helper()
		for _, op := range appliedOps(text) {
			if strings.Contains(op.Line, "10.0.0.60") || strings.Contains(op.Line, ":8080") || strings.Contains(op.Line, "fd00::60") {
				t.Errorf("%s: lvsd touched a foreign object: %s", when, op.Line)
			}
		}
	}
	service := func(ports string, w2 int) string {
		return fmt.Sprintf("service: web\nvip: %s\nports: %s\nforwarding: dr\nbackends:\n  - {address: %s}\n  - {address: %s, weight: %d}\n",
			vip, ports, tp.RS(1).V4, tp.RS(2).V4, w2)
	}

	// 1. lvsd starts and programs its own service beside the foreign ones.
	d := newDirector(t, director, map[string]string{"web": service("[80]", 1)})
	d.start()
	d.waitLog(0, 30*time.Second, "msg=reconciled")
	checkOps("start", d.log())
	check("after start")
	if own := ipvsSave(t, director); !strings.Contains(own, "-A -t 10.0.0.50:80 ") || !slices.Contains(addrsOf(t, director), netip.PrefixFrom(vip, 32)) {
		t.Fatalf("lvsd did not program its own service and VIP:\n%s", own)
	}

	// 2. A changed configuration: another port, another weight.
	mark := d.logSize()
	writeAtomic(t, filepath.Join(d.dir, "services.d", "web.yaml"), service("[80, 443]", 2))
	d.hup()
	d.waitLog(mark, 10*time.Second, "msg=reconciled")
	checkOps("reload", d.logSince(mark))
	check("after a reload")
	if own := ipvsSave(t, director); !strings.Contains(own, "-A -t 10.0.0.50:443 ") {
		t.Fatalf("lvsd did not apply the reload:\n%s", own)
	}

	// 3. lvsd's service is removed: its destinations go to weight 0, then
	// (no connections: at once, at the next trigger) the services go. The
	// VIP stays: the operator's 10.0.0.50:8080 service still needs it. A
	// second SIGHUP is that next trigger, unless the periodic check of
	// drains in progress came first.
	mark = d.logSize()
	if err := os.Remove(filepath.Join(d.dir, "services.d", "web.yaml")); err != nil {
		t.Fatal(err)
	}
	d.hup()
	d.waitLog(mark, 10*time.Second, "msg=reconciled")
	check("while draining")
	d.hup()
	if !strings.Contains(d.waitLog(mark, 10*time.Second, "op=delete-service"), "(no longer configured)") {
		t.Errorf("the pass after the drain did not delete lvsd's services:\n%s", d.logSince(mark))
	}
	d.waitLog(mark, 10*time.Second, "op=delete-service", "tcp:10.0.0.50:443")
	if strings.Contains(d.logSince(mark), "op=delete-address") {
		t.Errorf("lvsd deleted its VIP although the operator's 10.0.0.50:8080 service uses it:\n%s", d.logSince(mark))
	}
	checkOps("removal", d.logSince(mark))
	check("after the removal")
	save := ipvsSave(t, director)
	if got := foreignLines(save); len(got) != len(strings.Split(strings.TrimSpace(save), "\n")) {
		t.Errorf("after the removal lvsd's own services are still there:\n%s", save)
	}
	if !slices.Contains(addrsOf(t, director), netip.PrefixFrom(vip, 32)) {
		t.Errorf("after the removal the VIP %s, still used by the operator's service, is gone from %s", vip, director.Link)
	}

	// 4. lvsd stops.
	d.stop()
	check("after stop")
}
