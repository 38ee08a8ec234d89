package agent

import (
	"context"
	"errors"
	"maps"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/lvsd/lvsd/agent/config"
	"github.com/lvsd/lvsd/agent/planner"
	"github.com/lvsd/lvsd/ipvs/l4"

	"github.com/lvsd/lvsd/ipvs"
	"github.com/lvsd/lvsd/nat"
)

var (
	webKey = ipvs.ServiceKey{Protocol: l4.TCP, Addr: netip.MustParseAddr("10.0.0.50"), Port: 80}
	rs1    = ipvs.DestinationKey{Addr: netip.MustParseAddr("10.0.0.11"), Port: 80}
	rs2    = ipvs.DestinationKey{Addr: netip.MustParseAddr("10.0.0.12"), Port: 80}
)

// The drain record is the planner's output: a destination that leaves the
// configuration goes to weight 0 with its clock started, keeps its record
// while it drains, and is deleted once its connections are gone or its
// drain timed out; the record then forgets it.
func TestPlanDrains(t *testing.T) {
	t0 := time.Unix(1000, 0)
	want := planner.Desired{Services: []*planner.VirtualService{{Service: ipvs.Service{ServiceKey: webKey, Scheduler: "mh"}, DrainTimeout: 30 * time.Second,
		Destinations: []planner.Destination{{From: &config.Backend{Addr: rs1.Addr}, Port: rs1.Port, Weight: 1, SlotWeight: 1}}}}}
	actual := func(w2, conns int) planner.Actual {
		return planner.Actual{Services: planner.NewServiceTable(map[ipvs.ServiceKey]planner.ActualService{webKey: {Service: ipvs.Service{ServiceKey: webKey, Scheduler: "mh"},
			Destinations: []ipvs.Destination{{DestinationKey: rs1, Weight: 1}, {DestinationKey: rs2, Weight: w2, ActiveConns: uint32(conns)}}}})}
	}
	k := planner.DrainKey{Service: webKey, Destination: rs2}
	steps := []struct {
		name   string
		now    time.Duration
		w2     int
		conns  int
		drains planner.Drains
		ops    []string
		next   planner.Drains
	}{
		{"leaves the configuration", 0, 1, 3, planner.Drains{}, []string{"update-destination tcp:10.0.0.50:80 -> 10.0.0.12:80 weight 0 masq (draining)"}, planner.Drains{k: t0}},
		{"drains", 10 * time.Second, 0, 3, planner.Drains{k: t0}, nil, planner.Drains{k: t0}},
		{"found at weight 0 after a restart", 10 * time.Second, 0, 3, planner.Drains{}, nil, planner.Drains{k: t0.Add(10 * time.Second)}},
		{"connections gone", 10 * time.Second, 0, 0, planner.Drains{k: t0}, []string{"delete-destination tcp:10.0.0.50:80 -> 10.0.0.12:80 (drained)"}, planner.Drains{}},
		{"timed out", 30 * time.Second, 0, 3, planner.Drains{k: t0}, []string{"delete-destination tcp:10.0.0.50:80 -> 10.0.0.12:80 (drain timeout)"}, planner.Drains{}},
	}
	for _, s := range steps {
		t.Run(s.name, func(t *testing.T) {
			ops, next := planner.Plan(planner.PlanInput{Desired: want, Actual: actual(s.w2, s.conns), Drains: s.drains, Now: t0.Add(s.now), DrainTimeout: time.Hour})
			if got := planner.OpStrings(ops); !slices.Equal(got, s.ops) {
				t.Errorf("ops %q, want %q", got, s.ops)
			}
			if len(next) != len(s.next) || next[k] != s.next[k] {
				t.Errorf("drains %v, want %v", next, s.next)
			}
		})
	}
}

// The sync daemons start only behind their nftables guard, in the plan and
// in the apply; lvsd's daemons stop when connection sync is turned off,
// before the guard goes; another program's daemons stay.
func TestPlanDaemonsBehindTheirGuard(t *testing.T) {
	guarded, err := nat.Render(nat.Spec{SyncPorts: []uint16{8848, 8849}, SyncGroup: ipvs.DefaultSyncGroup})
	if err != nil {
		t.Fatal(err)
	}
	master := ipvs.Daemon{State: ipvs.DaemonMaster, Interface: "lo", SyncID: planner.SyncID, MaxLen: 44, Group: ipvs.DefaultSyncGroup, Port: 8848}
	on := planner.Desired{NAT: guarded, Daemons: []ipvs.Daemon{master}}
	kinds := func(ops []planner.Op) []string {
		var out []string
		for _, op := range ops {
			out = append(out, op.Kind.String())
		}
		return out
	}
	ops, _ := planner.Plan(planner.PlanInput{Desired: on})
	if got := kinds(ops); !slices.Equal(got, []string{"replace-nft-tables", "start-daemon"}) {
		t.Errorf("first start: %q, want the guard first", got)
	}
	running := master
	running.TTL = 1
	ops, _ = planner.Plan(planner.PlanInput{Desired: on, Actual: planner.Actual{NATDigest: guarded.Digest(), Daemons: []ipvs.Daemon{running}}})
	if len(ops) != 0 {
		t.Errorf("running as wanted: %q", planner.OpStrings(ops))
	}
	// Connection sync off: stop before the guard is removed.
	ops, _ = planner.Plan(planner.PlanInput{Desired: planner.Desired{}, Actual: planner.Actual{NATDigest: guarded.Digest(), Daemons: []ipvs.Daemon{running}}})
	if got := kinds(ops); !slices.Equal(got, []string{"stop-daemon", "remove-nft-tables"}) {
		t.Errorf("sync off: %q", got)
	}
	foreign := running
	foreign.SyncID = 9
	if ops, _ := planner.Plan(planner.PlanInput{Desired: planner.Desired{}, Actual: planner.Actual{Daemons: []ipvs.Daemon{foreign}}}); len(ops) != 0 {
		t.Errorf("another program's daemon: %q", planner.OpStrings(ops))
	}
	// A guard that fails to install keeps the daemon from starting.
	errs := Kernel{NAT: failingNAT{nat.NewFake()}, Daemons: ipvs.NewFake()}.Apply(t.Context(), []planner.Op{{Kind: planner.ReplaceNAT, Detail: &planner.Detail{NAT: guarded}}, {Kind: planner.StartDaemon, Detail: &planner.Detail{Daemon: master}}})
	if errs[0] == nil || errs[1] == nil {
		t.Errorf("apply: %v; want the start refused after the failed guard", errs)
	}
}

type failingNAT struct{ *nat.Fake }

func (failingNAT) Apply(context.Context, nat.Ruleset) error { return errors.New("nft: no") }

// The record is written ahead: what a plan adds is claimed before it runs;
// what it deletes leaves the record only once gone.
func TestOwnershipWriteAhead(t *testing.T) {
	vip := netip.MustParsePrefix("10.0.0.50/32")
	ops := []planner.Op{
		{Kind: planner.AddService, Service: ipvs.Service{ServiceKey: webKey}},
		{Kind: planner.AddAddress, Detail: &planner.Detail{Interface: "eth0", Address: vip}},
	}
	intended := planner.Ownership{}.Intend(ops, planner.ClaimServices|planner.ClaimAddresses)
	if !slices.Equal(intended.Services, []ipvs.ServiceKey{webKey}) || len(intended.Addresses) != 1 {
		t.Fatalf("intended %+v", intended)
	}
	// A failed add stays claimed: the object may exist, and a claim on a
	// missing one is harmless.
	if after := intended.After(ops, goneAfter(ops, []error{errors.New("boom"), nil})); !after.Equal(intended) {
		t.Errorf("after a failed add: %+v", after)
	}
	del := []planner.Op{{Kind: planner.DeleteService, Service: ipvs.Service{ServiceKey: webKey}}, {Kind: planner.DeleteAddress, Detail: &planner.Detail{Interface: "eth0", Address: vip}}}
	if after := intended.After(del, goneAfter(del, []error{errors.New("busy"), nil})); len(after.Services) != 1 || len(after.Addresses) != 0 {
		t.Errorf("after a failed and a done delete: %+v", after)
	}
	if after := intended.After(del, goneAfter(del, []error{ipvs.ErrNotFound, nil})); len(after.Services) != 0 {
		t.Errorf("a service found gone leaves the record: %+v", after)
	}
}

// Intend, Adopt and After are pure: the record they start from is never
// written, even where its lists have room to grow in place, and one they
// do not change is handed back as it is (no copy of every key per pass).
func TestOwnershipEditsLeaveTheOriginal(t *testing.T) {
	key := func(port uint16) ipvs.ServiceKey {
		return ipvs.ServiceKey{Protocol: l4.TCP, Addr: webKey.Addr, Port: port}
	}
	services := make([]ipvs.ServiceKey, 3, 8) // room to insert in place
	copy(services, []ipvs.ServiceKey{key(80), key(82), key(84)})
	addrs := make([]planner.OwnedAddress, 1, 4)
	addrs[0] = planner.OwnedAddress{Interface: "eth0", Prefix: netip.MustParsePrefix("10.0.0.50/32")}
	o := planner.Ownership{Services: services, Addresses: addrs}
	want := planner.Ownership{Services: slices.Clone(services), Addresses: slices.Clone(addrs)}
	other := planner.OwnedAddress{Interface: "eth0", Prefix: netip.MustParsePrefix("10.0.0.51/32")}

	added := o.Intend([]planner.Op{{Kind: planner.AddService, Service: ipvs.Service{ServiceKey: key(81)}}, {Kind: planner.AddAddress, Detail: &planner.Detail{Interface: other.Interface, Address: other.Prefix}}}, planner.ClaimServices|planner.ClaimAddresses)
	adopted := o.Adopt([]ipvs.ServiceKey{key(83)})
	deleted := o.After([]planner.Op{{Kind: planner.DeleteService, Service: ipvs.Service{ServiceKey: key(80)}}, {Kind: planner.DeleteAddress, Detail: &planner.Detail{Interface: "eth0", Address: addrs[0].Prefix}}}, []bool{true, true})
	if !o.Equal(want) || !slices.Equal(services[:cap(services)][3:], make([]ipvs.ServiceKey, 5)) {
		t.Fatalf("the original changed: %+v (its spare room %v)", o, services[:cap(services)][3:])
	}
	for _, c := range []struct {
		name     string
		got      planner.Ownership
		services []ipvs.ServiceKey
		addrs    int
	}{
		{"intend", added, []ipvs.ServiceKey{key(80), key(81), key(82), key(84)}, 2},
		{"adopt", adopted, []ipvs.ServiceKey{key(80), key(82), key(83), key(84)}, 1},
		{"after", deleted, []ipvs.ServiceKey{key(82), key(84)}, 0},
	} {
		if !slices.Equal(c.got.Services, c.services) || len(c.got.Addresses) != c.addrs {
			t.Errorf("%s: %+v, want services %v and %d addresses", c.name, c.got, c.services, c.addrs)
		}
	}
	same := o.Adopt([]ipvs.ServiceKey{key(82)}).Intend([]planner.Op{{Kind: planner.AddAddress, Detail: &planner.Detail{Interface: "eth0", Address: addrs[0].Prefix}}}, planner.ClaimAddresses)
	if &same.Services[0] != &o.Services[0] || &same.Addresses[0] != &o.Addresses[0] {
		t.Errorf("nothing changed, yet the lists were copied")
	}
}

// A VIP whose service could not be added is not served: holding it would
// attract traffic nothing forwards. One already in the kernel is.
func TestServed(t *testing.T) {
	d := planner.Desired{Services: []*planner.VirtualService{{Service: ipvs.Service{ServiceKey: webKey}, VIP: webKey.Addr}},
		VIPs: []planner.VIPAddresses{{VIP: webKey.Addr}}}
	ops := []planner.Op{{Kind: planner.AddService, Service: ipvs.Service{ServiceKey: webKey}}}
	if got := Served(d, planner.Actual{}, ops, []error{errors.New("no memory")}); len(got.VIPs) != 0 {
		t.Errorf("failed add: served %v", got.VIPs)
	}
	if got := Served(d, planner.Actual{}, ops, []error{nil}); len(got.VIPs) != 1 {
		t.Errorf("done: served %v", got.VIPs)
	}
	if got := Served(d, planner.Actual{}, ops, []error{ipvs.ErrExists}); len(got.VIPs) != 1 {
		t.Errorf("already there: served %v", got.VIPs)
	}
}

// The holder keeps the addresses of IPVS services it does not want and the
// plan does not delete; fwmark services have none.
func TestAddressesInUse(t *testing.T) {
	key := func(addr string, port uint16) ipvs.ServiceKey {
		return ipvs.ServiceKey{Protocol: l4.TCP, Addr: netip.MustParseAddr(addr), Port: port}
	}
	wanted, draining, deleted, foreign := key("10.0.0.1", 80), key("10.0.0.2", 80), key("10.0.0.3", 80), key("::ffff:10.0.0.4", 443)
	mark := ipvs.ServiceKey{FWMark: 7}
	d := planner.Desired{Services: []*planner.VirtualService{{Service: ipvs.Service{ServiceKey: wanted}}}}
	a := planner.Actual{}
	for _, k := range []ipvs.ServiceKey{wanted, draining, deleted, foreign, mark} {
		a.Services.Set(k, planner.ActualService{Service: ipvs.Service{ServiceKey: k}})
	}
	ops := []planner.Op{{Kind: planner.DeleteService, Service: ipvs.Service{ServiceKey: deleted}}}
	got := planner.AddressesInUse(d, a, ops)
	want := map[netip.Addr]bool{netip.MustParseAddr("10.0.0.2"): true, netip.MustParseAddr("10.0.0.4"): true}
	if !maps.Equal(got, want) {
		t.Errorf("in use %v, want %v", got, want)
	}
}
