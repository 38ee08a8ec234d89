package director

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"reflect"
	"slices"
	"sync"
	"testing"

	"github.com/lvsd/lvsd/agent"
	"github.com/lvsd/lvsd/agent/views"
	"github.com/lvsd/lvsd/cluster/vrrp"
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

// reportingRouter is a fakeRouter that reports a status, as vrrp.Router.
type reportingRouter struct {
	fakeRouter
	status vrrp.Status
	drops  map[string]uint64
}

func (r *reportingRouter) Status() vrrp.Status      { return r.status }
func (r *reportingRouter) Drops() map[string]uint64 { return r.drops }

func TestVRRPStatusForTheViews(t *testing.T) {
	tests := []struct {
		name    string
		routers vrrpRouters
		want    []views.VRRPRouterStatus
	}{
		{name: "a router that cannot report is left out", routers: vrrpRouters{&fakeRouter{}}},
		{name: "backup of a master, drops", routers: vrrpRouters{&reportingRouter{
			status: vrrp.Status{VRID: 51, Priority: 100, Interval: 100, State: vrrp.Backup, Master: netip.MustParseAddr("192.0.2.11"), BecameMaster: 3},
			drops:  map[string]uint64{"bad checksum": 2}}},
			want: []views.VRRPRouterStatus{{Family: "ipv4", VRID: 51, State: "backup", Priority: 100, Master: "192.0.2.11",
				AdvertInterval: 1, BecameMaster: 3, Dropped: map[string]uint64{"bad checksum": 2}}}},
		{name: "master of IPv6, no drops", routers: vrrpRouters{&reportingRouter{
			status: vrrp.Status{VRID: 7, Priority: 200, Interval: 25, IPv6: true, State: vrrp.Master, BecameMaster: 1},
			drops:  map[string]uint64{}}},
			want: []views.VRRPRouterStatus{{Family: "ipv6", VRID: 7, State: "master", Priority: 200, AdvertInterval: 0.25, BecameMaster: 1}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.routers.status(); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("status:\n got %+v\nwant %+v", got, tt.want)
			}
		})
	}
}
