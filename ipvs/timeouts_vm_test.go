//go:build vmtest && linux

package ipvs

import (
	"context"
	"errors"
	"net/netip"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lvsd/lvsd/ipvs/l4"
)

// The kernel and the Fake agree on timeouts (a fresh namespace has the
// defaults, zero fields stay, a set one reads back, ipvsadm shows it, and
// another namespace keeps its own) and on thresholds (read back as written,
// a lower above the upper refused with ERANGE).
func TestVMTimeoutsAndThresholds(t *testing.T) {
	ctx := context.Background()
	ns := newVMNS(t)
	run(t, "ip", "-n", ns.name, "link", "set", "lo", "up")
	k := openVM(t, ns.path)
	f := NewFake()
	for _, c := range []TimeoutConfig{k, f} {
		if got, err := c.Timeouts(ctx); err != nil || got != DefaultTimeouts {
			t.Fatalf("%T: fresh namespace timeouts %+v (%v), want %+v", c, got, err, DefaultTimeouts)
		}
		if err := c.SetTimeouts(ctx, Timeouts{TCP: 3 * time.Second, UDP: 7 * time.Second}); err != nil {
			t.Fatalf("%T: %v", c, err)
		}
		want := Timeouts{TCP: 3 * time.Second, TCPFin: 120 * time.Second, UDP: 7 * time.Second}
		if got, err := c.Timeouts(ctx); err != nil || got != want {
			t.Errorf("%T: after setting tcp and udp: %+v (%v), want %+v", c, got, err, want)
		}
	}
	if out := run(t, "ip", "netns", "exec", ns.name, "ipvsadm", "-L", "--timeout"); !strings.Contains(out, "Timeout (tcp tcpfin udp): 3 120 7") {
		t.Errorf("ipvsadm -L --timeout: %q", out)
	}
	other := openVM(t, newVMNS(t).path)
	if got, err := other.Timeouts(ctx); err != nil || got != DefaultTimeouts {
		t.Errorf("another namespace: %+v (%v), want the defaults: timeouts are per namespace", got, err)
	}

	svc := Service{ServiceKey: ServiceKey{Protocol: l4.TCP, Addr: netip.MustParseAddr("10.0.0.50"), Port: 80}, Scheduler: "mh", Flags: FlagMHFallback}
	dst := Destination{DestinationKey: DestinationKey{Addr: netip.MustParseAddr("10.0.2.11"), Port: 80}, Weight: 1,
		Forwarding: DirectRoute, UpperThreshold: 2, LowerThreshold: 1}
	for _, i := range []Interface{k, f} {
		if err := i.AddService(ctx, svc); err != nil {
			t.Fatal(err)
		}
		if err := i.AddDestination(ctx, svc.ServiceKey, dst); err != nil {
			t.Fatalf("%T: %v", i, err)
		}
		if got, err := i.Destinations(ctx, svc.ServiceKey); err != nil || len(got) != 1 || !got[0].SameOptions(dst) {
			t.Errorf("%T: %+v (%v), want thresholds 2/1", i, got, err)
		}
		bad := dst
		bad.UpperThreshold, bad.LowerThreshold = 2, 3
		if err := i.UpdateDestination(ctx, svc.ServiceKey, bad); !errors.Is(err, syscall.ERANGE) {
			t.Errorf("%T: lower above upper: %v, want ERANGE", i, err)
		}
		bad.UpperThreshold = 0
		if err := i.UpdateDestination(ctx, svc.ServiceKey, bad); !errors.Is(err, syscall.ERANGE) {
			t.Errorf("%T: lower without upper: %v, want ERANGE", i, err)
		}
	}
}
