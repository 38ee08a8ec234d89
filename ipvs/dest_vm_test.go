//go:build vmtest && linux

package ipvs

import (
	"context"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"testing"

	"github.com/lvsd/lvsd/ipvs/l4"
)

// On the real kernel, every destination write goes through the one
// writer: a GUE or GRE destination whose weight alone changes keeps its
// encapsulation (ipvsadm agrees), and plain destinations — direct
// routing, NAT with thresholds, IPIP, IPv6, behind a fwmark — read back as
// written, before and after the change, and are gone after the delete.
func TestVMDestinationWritesKeepTunnel(t *testing.T) {
	ctx := context.Background()
	ns := newVMNS(t)
	run(t, "ip", "-n", ns.name, "link", "set", "lo", "up") // IPVS refuses destinations while lo is down
	k := openVM(t, ns.path)
	v4 := Service{ServiceKey: ServiceKey{Protocol: l4.TCP, Addr: netip.MustParseAddr("10.0.0.50"), Port: 80}, Scheduler: "mh", Flags: FlagMHFallback}
	v6 := Service{ServiceKey: ServiceKey{Protocol: l4.UDP, Addr: netip.MustParseAddr("fd00::50"), Port: 53, IPv6: true}, Scheduler: "rr"}
	mark := Service{ServiceKey: ServiceKey{FWMark: 7}, Scheduler: "rr"}
	dest := func(addr string, port uint16, weight int, fwd Forwarding) Destination {
		return Destination{DestinationKey: DestinationKey{Addr: netip.MustParseAddr(addr), Port: port}, Weight: weight, Forwarding: fwd}
	}
	gue := dest("10.0.2.11", 80, 3, Tunnel)
	gue.Tunnel = TunnelOptions{Type: TunnelGUE, Port: 6080, Flags: TunnelChecksum}
	gre := dest("10.0.2.12", 80, 2, Tunnel)
	gre.Tunnel = TunnelOptions{Type: TunnelGRE}
	route := dest("10.0.2.13", 80, 1, DirectRoute)
	masq := dest("10.0.2.14", 8080, 4, Masquerade)
	masq.UpperThreshold, masq.LowerThreshold = 100, 10
	ipip := dest("10.0.2.15", 80, 1, Tunnel)
	route6 := dest("fd02::11", 53, 5, DirectRoute)
	route6.UpperThreshold = 50
	marked := dest("10.0.2.16", 0, 1, DirectRoute)
	want := map[ServiceKey][]*Destination{
		v4.ServiceKey:   {&gue, &gre, &route, &masq, &ipip},
		v6.ServiceKey:   {&route6},
		mark.ServiceKey: {&marked},
	}
	for _, svc := range []Service{v4, v6, mark} {
		if err := k.AddService(ctx, svc); err != nil {
			t.Fatal(err)
		}
		for _, d := range want[svc.ServiceKey] {
			if err := k.AddDestination(ctx, svc.ServiceKey, *d); err != nil {
				t.Fatal(err)
			}
		}
	}
	check := func(when string) {
		t.Helper()
		for svc, dests := range want {
			got, err := k.Destinations(ctx, svc)
			if err != nil {
				t.Fatalf("%s: %v", when, err)
			}
			if len(got) != len(dests) {
				t.Errorf("%s: %s has %d destinations, want %d: %+v", when, svc, len(got), len(dests), got)
			}
			for _, w := range dests {
				var found bool
				for _, g := range got {
					if g.DestinationKey == w.DestinationKey {
						found = true
						if !g.SameOptions(*w) {
							t.Errorf("%s: %s -> %s is %s weight %d %s, want %s weight %d %s", when, svc, g.DestinationKey,
								g.Method(), g.Weight, g.Thresholds(), w.Method(), w.Weight, w.Thresholds())
						}
					}
				}
				if !found {
					t.Errorf("%s: %s -> %s missing", when, svc, w.DestinationKey)
				}
			}
		}
	}
	// tunInfo is ipvsadm's line of a destination, which it reads with
	// its own netlink code, in fields.
	tunInfo := func(d Destination) []string {
		t.Helper()
		out := run(t, "ip", "netns", "exec", ns.name, "ipvsadm", "-Ln", "--tun-info")
		for line := range strings.Lines(out) {
			if f := strings.Fields(line); len(f) > 1 && f[0] == "->" && f[1] == d.DestinationKey.String() {
				return f
			}
		}
		t.Fatalf("ipvsadm does not list %s:\n%s", d.DestinationKey, out)
		return nil
	}
	check("added")
	t.Logf("ipvsadm -Ln --tun-info after the adds:\n%s", run(t, "ip", "netns", "exec", ns.name, "ipvsadm", "-Ln", "--tun-info"))

	// Only the weight changes, on every destination.
	for svc, dests := range want {
		for _, d := range dests {
			d.Weight++
			if err := k.UpdateDestination(ctx, svc, *d); err != nil {
				t.Fatal(err)
			}
		}
	}
	check("after the weight change")
	t.Logf("ipvsadm -Ln --tun-info after the weight change:\n%s", run(t, "ip", "netns", "exec", ns.name, "ipvsadm", "-Ln", "--tun-info"))
	// ipvsadm's columns: -> address Forward TunnelInfo Weight ...
	for _, c := range []struct {
		d      Destination
		tunnel string // TunnelInfo: type, GUE port, checksum (+c) or none (-c)
	}{{gue, "gue:6080:+c"}, {gre, "gre:-c"}, {ipip, "ipip"}} {
		f := tunInfo(c.d)
		if len(f) < 5 || f[2] != "Tunnel" || !strings.HasPrefix(f[3], c.tunnel) || f[4] != strconv.Itoa(c.d.Weight) {
			t.Errorf("ipvsadm shows %s as %q, want Tunnel %s… weight %d", c.d.DestinationKey, strings.Join(f, " "), c.tunnel, c.d.Weight)
		}
	}

	// Its weight to 0 (a drain) and back keeps GUE's checksum flag too.
	for _, w := range []int{0, 9} {
		gue.Weight = w
		if err := k.UpdateDestination(ctx, v4.ServiceKey, gue); err != nil {
			t.Fatal(err)
		}
		check(fmt.Sprintf("after a GUE weight of %d", w))
	}

	for svc, dests := range want {
		for _, d := range dests {
			if err := k.DeleteDestination(ctx, svc, d.DestinationKey); err != nil {
				t.Fatal(err)
			}
		}
		want[svc] = nil
	}
	check("after the deletes")
}
