//go:build vmtest && linux

package ipvs

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lvsd/lvsd/ipvs/l4"
)

// The kernel and the Fake agree on tunnel destinations: GUE and GRE read
// back as written, a weight change keeps the encapsulation, IPIP clears
// it, and GUE without a port is refused by both.
func TestVMTunnelDestinations(t *testing.T) {
	ctx := context.Background()
	ns := newVMNS(t)
	run(t, "ip", "-n", ns.name, "link", "set", "lo", "up") // IPVS refuses destinations while lo is down
	k := openVM(t, ns.path)
	f := NewFake()
	svc := Service{ServiceKey: ServiceKey{Protocol: l4.TCP, Addr: netip.MustParseAddr("10.0.0.50"), Port: 80}, Scheduler: "mh", Flags: FlagMHFallback}
	dst := Destination{DestinationKey: DestinationKey{Addr: netip.MustParseAddr("10.0.2.11"), Port: 80}, Weight: 3,
		Forwarding: Tunnel, Tunnel: TunnelOptions{Type: TunnelGUE, Port: 6080, Flags: TunnelChecksum}}
	both := func(what string, call func(Interface) error) {
		t.Helper()
		for _, i := range []Interface{k, f} {
			if err := call(i); err != nil {
				t.Fatalf("%s (%T): %v", what, i, err)
			}
		}
	}
	check := func(want Destination) {
		t.Helper()
		for _, i := range []Interface{k, f} {
			got, err := i.Destinations(ctx, svc.ServiceKey)
			if err != nil || len(got) != 1 || !got[0].SameOptions(want) {
				t.Fatalf("%T: destinations %+v (%v), want %s weight %d", i, got, err, want.Method(), want.Weight)
			}
		}
	}
	both("adding the service", func(i Interface) error { return i.AddService(ctx, svc) })
	both("adding a GUE destination", func(i Interface) error { return i.AddDestination(ctx, svc.ServiceKey, dst) })
	check(dst)
	t.Logf("ipvsadm:\n%s", run(t, "ip", "netns", "exec", ns.name, "ipvsadm", "-Ln", "--tun-info"))

	dst.Weight = 0
	both("lowering the weight", func(i Interface) error { return i.UpdateDestination(ctx, svc.ServiceKey, dst) })
	check(dst)
	dst.Tunnel = TunnelOptions{Type: TunnelGRE}
	both("switching to GRE", func(i Interface) error { return i.UpdateDestination(ctx, svc.ServiceKey, dst) })
	check(dst)
	dst.Tunnel = TunnelOptions{}
	both("switching to IPIP", func(i Interface) error { return i.UpdateDestination(ctx, svc.ServiceKey, dst) })
	check(dst)
	if out := run(t, "ip", "netns", "exec", ns.name, "ipvsadm", "-Ln", "--tun-info"); !strings.Contains(out, "Tunnel  ipip") {
		t.Errorf("ipvsadm does not show IPIP after the switch:\n%s", out)
	}

	bad := dst
	bad.Tunnel = TunnelOptions{Type: TunnelGUE}
	for _, i := range []Interface{k, f} {
		if err := i.UpdateDestination(ctx, svc.ServiceKey, bad); !errors.Is(err, syscall.EINVAL) {
			t.Errorf("%T: GUE without a port: %v, want EINVAL", i, err)
		}
	}
	// An IPv6 service and its IPIP (IPv6-in-IPv6) destination read back too.
	svc6 := Service{ServiceKey: ServiceKey{Protocol: l4.TCP, Addr: netip.MustParseAddr("fd00::50"), Port: 80, IPv6: true}, Scheduler: "mh"}
	dst6 := Destination{DestinationKey: DestinationKey{Addr: netip.MustParseAddr("fd02::11"), Port: 80}, Weight: 1, Forwarding: Tunnel}
	if err := k.AddService(ctx, svc6); err != nil {
		t.Fatal(err)
	}
	if err := k.AddDestination(ctx, svc6.ServiceKey, dst6); err != nil {
		t.Fatal(err)
	}
	if got, err := k.Destinations(ctx, svc6.ServiceKey); err != nil || len(got) != 1 || got[0].DestinationKey != dst6.DestinationKey || !got[0].SameOptions(dst6) {
		t.Errorf("IPv6 tunnel destination: %+v, %v", got, err)
	}
}

// Destinations read through lvsd's own dump match what ipvsadm shows: the
// kernel's list order (a new destination goes to the head), the
// thresholds, and the 64-bit counters of real packets.
func TestVMDestinationReadBack(t *testing.T) {
	ctx := context.Background()
	ns := newVMNS(t)
	run(t, "ip", "-n", ns.name, "link", "set", "lo", "up")
	run(t, "ip", "-n", ns.name, "link", "add", "v0", "type", "veth", "peer", "name", "v1")
	run(t, "ip", "-n", ns.name, "addr", "add", "10.0.2.1/24", "dev", "v0")
	run(t, "ip", "-n", ns.name, "link", "set", "v0", "up")
	run(t, "ip", "-n", ns.name, "link", "set", "v1", "up")
	run(t, "ip", "-n", ns.name, "route", "add", "10.0.0.50/32", "dev", "v0")
	k := openVM(t, ns.path)
	svc := Service{ServiceKey: ServiceKey{Protocol: l4.UDP, Addr: netip.MustParseAddr("10.0.0.50"), Port: 5353}, Scheduler: "rr"}
	if err := k.AddService(ctx, svc); err != nil {
		t.Fatal(err)
	}
	var added []Destination
	for i, a := range []string{"10.0.2.11", "10.0.2.12", "10.0.2.13"} {
		d := Destination{DestinationKey: DestinationKey{Addr: netip.MustParseAddr(a), Port: 5353}, Weight: i + 1,
			Forwarding: DirectRoute, UpperThreshold: uint32(10 * (i + 1)), LowerThreshold: uint32(i)}
		if err := k.AddDestination(ctx, svc.ServiceKey, d); err != nil {
			t.Fatal(err)
		}
		added = append([]Destination{d}, added...) // the kernel's order: newest first
	}
	const packets = 300
	ns.in(t, func() {
		c, err := net.Dial("udp", "10.0.0.50:5353")
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		for range packets {
			c.Write([]byte("lvsd"))
		}
	})
	// The kernel folds its per-CPU counters into what it reports every
	// 2 s (its rate estimator): wait for them.
	var got []Destination
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		var err error
		if got, err = k.Destinations(ctx, svc.ServiceKey); err != nil {
			t.Fatal(err)
		}
		var n uint64
		for _, d := range got {
			n += d.Traffic().PacketsIn
		}
		if n == packets || time.Now().After(deadline) {
			break
		}
	}
	out := run(t, "ip", "netns", "exec", ns.name, "ipvsadm", "-Ln", "--stats", "--exact")
	t.Logf("ipvsadm -Ln --stats --exact:\n%s", out)
	var total uint64
	for i, d := range got {
		if d.DestinationKey != added[i].DestinationKey || !d.SameOptions(added[i]) {
			t.Errorf("destination %d: got %+v, want %+v", i, d, added[i])
		}
		line := fmt.Sprintf("%s:%d %d %d", d.Addr, d.Port, d.Traffic().Connections, d.Traffic().PacketsIn)
		if !strings.Contains(strings.Join(strings.Fields(out), " "), line) {
			t.Errorf("ipvsadm does not show %q", line)
		}
		total += d.Traffic().PacketsIn
	}
	if total != packets {
		t.Errorf("packets in: %d, want %d", total, packets)
	}
}
