package director

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"slices"
	"sync"
	"testing"

	"github.com/lvsd/lvsd/agent"
)

// fakeRouter is master of every VIP it serves.
type fakeRouter struct {
	ev      *events
	mu      sync.Mutex
	served  []netip.Addr
	stopped bool
	changed chan struct{}
}

func (r *fakeRouter) Serve(vips []netip.Addr) {
	r.mu.Lock()
	r.served = slices.Clone(vips)
	r.mu.Unlock()
	select {
	case r.changed <- struct{}{}:
	default:
	}
}
func (r *fakeRouter) ServeHomes(map[netip.Addr]string) {}
func (r *fakeRouter) Holds(vip netip.Addr) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return !r.stopped && slices.Contains(r.served, vip)
}
func (r *fakeRouter) AddressChanged(netip.Addr, bool) {}
func (r *fakeRouter) Changed() <-chan struct{}        { return r.changed }
func (r *fakeRouter) Healthy() bool                   { return true }
func (r *fakeRouter) Stop(context.Context) error {
	r.mu.Lock()
	r.stopped = true
	r.mu.Unlock()
	r.ev.add("vrrp stop (priority 0)")
	return nil
}

// In mode vrrp the director starts a virtual router instead of joining a
// cluster, holds its VIP while master, and at its stop removes the address
// before it sends priority 0: never on both directors.
func TestRunVRRP(t *testing.T) {
	o, addrs, ev := setup(t, false)
	f, err := os.OpenFile(o.ConfigPath, os.O_APPEND|os.O_WRONLY, 0)
	must(t, err)
	_, err = fmt.Fprint(f, "cluster:\n  mode: vrrp\n  vrrp: {virtual_router_id: 51, priority: 150, advert_int: 100ms}\n")
	must(t, err)
	must(t, f.Close())
	o.Config, err = agent.LoadConfig(o.ConfigPath)
	must(t, err)
	o.StartVRRP = func(_ context.Context, r VRRPRouter) (Router, error) {
		ev.add(fmt.Sprintf("vrrp start on %s v6=%v vrid %d priority %d interval %d cs, 10.0.0.2 a VIP: %v, 10.0.0.50: %v",
			r.Interface, r.IPv6, r.Config.VRID, r.Config.Priority, r.Config.Interval,
			r.IsVIP(netip.MustParseAddr("10.0.0.2")), r.IsVIP(netip.MustParseAddr("10.0.0.50"))))
		return &fakeRouter{ev: ev, changed: make(chan struct{}, 1)}, nil
	}
	if err := runUntilHeld(t, o, addrs); err != nil {
		t.Fatal(err)
	}
	want := []string{"vrrp start on eth0 v6=false vrid 51 priority 150 interval 10 cs, 10.0.0.2 a VIP: false, 10.0.0.50: true",
		"delete-address 10.0.0.50/32", "vrrp stop (priority 0)"}
	if got := ev.list(); !slices.Equal(got, want) {
		t.Errorf("events:\n got %q\nwant %q", got, want)
	}
}
