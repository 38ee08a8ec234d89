package ipvs

import (
	"context"
	"errors"
	"net/netip"
	"syscall"
	"testing"

	"github.com/lvsd/lvsd/ipvs/l4"
)

// The tunnel type is an option: a destination whose encapsulation differs
// needs an update, and the Fake keeps what an update wrote, or refuses a
// GUE destination without a port as the kernel does.
func TestFakeTunnelDestinations(t *testing.T) {
	ctx := context.Background()
	f := NewFake()
	svc := Service{ServiceKey: ServiceKey{Protocol: l4.TCP, Addr: netip.MustParseAddr("10.0.0.50"), Port: 80}, Scheduler: "mh"}
	if err := f.AddService(ctx, svc); err != nil {
		t.Fatal(err)
	}
	ipip := Destination{DestinationKey: DestinationKey{Addr: netip.MustParseAddr("10.0.1.11"), Port: 80}, Weight: 1, Forwarding: Tunnel}
	gue := ipip
	gue.Tunnel = TunnelOptions{Type: TunnelGUE, Port: 6080}
	if ipip.SameOptions(gue) {
		t.Error("IPIP and GUE destinations compare as the same options")
	}
	noPort := ipip
	noPort.Tunnel.Type = TunnelGUE
	if err := f.AddDestination(ctx, svc.ServiceKey, noPort); !errors.Is(err, syscall.EINVAL) {
		t.Errorf("GUE without a port: %v, want EINVAL", err)
	}
	if err := f.AddDestination(ctx, svc.ServiceKey, ipip); err != nil {
		t.Fatal(err)
	}
	if err := f.UpdateDestination(ctx, svc.ServiceKey, gue); err != nil {
		t.Fatal(err)
	}
	if err := f.UpdateDestination(ctx, svc.ServiceKey, noPort); !errors.Is(err, syscall.EINVAL) {
		t.Errorf("update to GUE without a port: %v, want EINVAL", err)
	}
	got, err := f.Destinations(ctx, svc.ServiceKey)
	if err != nil || len(got) != 1 || !got[0].SameOptions(gue) {
		t.Errorf("after the update: %+v, %v; want %+v", got, err, gue)
	}
	want := []string{"add-destination tcp:10.0.0.50:80 10.0.1.11:80 weight=1 tunnel",
		"update-destination tcp:10.0.0.50:80 10.0.1.11:80 weight=1 tunnel/gue:6080"}
	if ops := f.Ops(); len(ops) != 3 || ops[1] != want[0] || ops[2] != want[1] {
		t.Errorf("ops %q, want add-service and %q", ops, want)
	}
}
