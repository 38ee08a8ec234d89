package ipvs

import (
	"context"
	"errors"
	"net/netip"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/lvsd/lvsd/ipvs/l4"
)

// The Fake starts at the kernel's defaults, changes only what is set and
// refuses what the kernel refuses without changing anything.
func TestFakeTimeouts(t *testing.T) {
	ctx := context.Background()
	f := NewFake()
	if got, _ := f.Timeouts(ctx); got != DefaultTimeouts {
		t.Fatalf("fresh fake: %+v, want the kernel's defaults %+v", got, DefaultTimeouts)
	}
	if err := f.SetTimeouts(ctx, Timeouts{TCP: 3 * time.Second}); err != nil {
		t.Fatal(err)
	}
	if err := f.SetTimeouts(ctx, Timeouts{UDP: 2 * time.Second, TCP: MaxTimeout + time.Second}); err == nil {
		t.Fatal("a timeout above MaxTimeout was accepted")
	}
	want := Timeouts{TCP: 3 * time.Second, TCPFin: 120 * time.Second, UDP: 300 * time.Second}
	if got, _ := f.Timeouts(ctx); got != want {
		t.Errorf("after one good and one refused set: %+v, want %+v", got, want)
	}
	if ops := f.Ops(); !slices.Equal(ops, []string{"set-timeouts tcp=3s"}) {
		t.Errorf("ops %q", ops)
	}
}

// The Fake refuses a lower threshold above the upper one, as the kernel
// does with ERANGE, and keeps the thresholds an update sets.
func TestFakeThresholds(t *testing.T) {
	ctx := context.Background()
	f := NewFake()
	svc := Service{ServiceKey: ServiceKey{Protocol: l4.TCP, Addr: netip.MustParseAddr("192.0.2.1"), Port: 80}, Scheduler: "mh"}
	if err := f.AddService(ctx, svc); err != nil {
		t.Fatal(err)
	}
	dst := Destination{DestinationKey: DestinationKey{Addr: netip.MustParseAddr("10.0.0.1"), Port: 80}, Weight: 1, Forwarding: DirectRoute}
	for _, bad := range []Destination{{LowerThreshold: 1}, {UpperThreshold: 2, LowerThreshold: 3}} {
		d := dst
		d.UpperThreshold, d.LowerThreshold = bad.UpperThreshold, bad.LowerThreshold
		if err := f.AddDestination(ctx, svc.ServiceKey, d); !errors.Is(err, syscall.ERANGE) {
			t.Errorf("adding %s: error %v, want ERANGE", d.Thresholds(), err)
		}
	}
	dst.UpperThreshold, dst.LowerThreshold = 2, 1
	if err := f.AddDestination(ctx, svc.ServiceKey, dst); err != nil {
		t.Fatal(err)
	}
	dst.UpperThreshold, dst.LowerThreshold = 5, 5
	if err := f.UpdateDestination(ctx, svc.ServiceKey, dst); err != nil {
		t.Fatal(err)
	}
	got, _ := f.Destinations(ctx, svc.ServiceKey)
	if len(got) != 1 || !got[0].SameOptions(dst) {
		t.Errorf("after the update: %+v, want thresholds 5/5", got)
	}
	want := []string{"add-destination tcp:192.0.2.1:80 10.0.0.1:80 weight=1 route upper 2 lower 1",
		"update-destination tcp:192.0.2.1:80 10.0.0.1:80 weight=1 route upper 5 lower 5"}
	if ops := f.Ops()[1:]; !slices.Equal(ops, want) {
		t.Errorf("ops %q, want %q", ops, want)
	}
}
