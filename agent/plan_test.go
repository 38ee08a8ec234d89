package agent

import (
	"context"
	"errors"
	"maps"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/lvsd/lvsd/ipvs"
	"github.com/lvsd/lvsd/nat"
)

var (
	webKey = ipvs.ServiceKey{Protocol: ipvs.TCP, Addr: netip.MustParseAddr("10.0.0.50"), Port: 80}
	rs1    = ipvs.DestinationKey{Addr: netip.MustParseAddr("10.0.0.11"), Port: 80}
	rs2    = ipvs.DestinationKey{Addr: netip.MustParseAddr("10.0.0.12"), Port: 80}
)

// The drain record is the planner's output: a destination that leaves the
// configuration goes to weight 0 with its clock started, keeps its record
// while it drains, and is deleted once its connections are gone or its
// drain timed out; the record then forgets it.
func TestPlanDrains(t *testing.T) {
	t0 := time.Unix(1000, 0)
	want := Desired{Services: []*VirtualService{{Service: ipvs.Service{ServiceKey: webKey, Scheduler: "mh"}, DrainTimeout: 30 * time.Second,
		Destinations: []Destination{{Destination: ipvs.Destination{DestinationKey: rs1, Weight: 1}, SlotWeight: 1}}}}}
	actual := func(w2, conns int) Actual {
		return Actual{Services: tableOf(map[ipvs.ServiceKey]ActualService{webKey: {Service: ipvs.Service{ServiceKey: webKey, Scheduler: "mh"},
			Destinations: []ipvs.Destination{{DestinationKey: rs1, Weight: 1}, {DestinationKey: rs2, Weight: w2, ActiveConns: conns}}}})}
	}
	k := DrainKey{webKey, rs2}
	steps := []struct {
		name   string
		now    time.Duration
		w2     int
		conns  int
		drains Drains
		ops    []string
		next   Drains
	}{
		{"leaves the configuration", 0, 1, 3, Drains{}, []string{"update-destination tcp:10.0.0.50:80 -> 10.0.0.12:80 weight 0 masq (draining)"}, Drains{k: t0}},
		{"drains", 10 * time.Second, 0, 3, Drains{k: t0}, nil, Drains{k: t0}},
		{"found at weight 0 after a restart", 10 * time.Second, 0, 3, Drains{}, nil, Drains{k: t0.Add(10 * time.Second)}},
		{"connections gone", 10 * time.Second, 0, 0, Drains{k: t0}, []string{"delete-destination tcp:10.0.0.50:80 -> 10.0.0.12:80 (drained)"}, Drains{}},
		{"timed out", 30 * time.Second, 0, 3, Drains{k: t0}, []string{"delete-destination tcp:10.0.0.50:80 -> 10.0.0.12:80 (drain timeout)"}, Drains{}},
	}
	for _, s := range steps {
		t.Run(s.name, func(t *testing.T) {
			ops, next := Plan(PlanInput{Desired: want, Actual: actual(s.w2, s.conns), Drains: s.drains, Now: t0.Add(s.now), DrainTimeout: time.Hour})
			if got := opStrings(ops); !slices.Equal(got, s.ops) {
				t.Errorf("ops %q, want %q", got, s.ops)
			}
			if len(next) != len(s.next) || next[k] != s.next[k] {
				t.Errorf("drains %v, want %v", next, s.next)
			}
		})
	}
}

// Sysctls are set only where the value differs (the kernel prints vectors
// tab-separated), in key order; a missing one is planned and says so.
func TestPlanSysctls(t *testing.T) {
	d := Desired{Sysctls: map[string]string{"net/ipv4/vs/sync_threshold": "3 0", "net/ipv4/ip_forward": "1", "net/ipv4/vs/conntrack": "1"}}
	a := Actual{Sysctls: map[string]string{"net/ipv4/vs/sync_threshold": "3\t0", "net/ipv4/ip_forward": "0"}}
	want := []string{"set-sysctl net/ipv4/ip_forward=1 (was 0)", "set-sysctl net/ipv4/vs/conntrack=1 (was missing)"}
	if got := opStrings(planSysctls(d, a)); !slices.Equal(got, want) {
		t.Errorf("got %q, want %q", got, want)
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
	master := ipvs.Daemon{State: ipvs.DaemonMaster, Interface: "lo", SyncID: SyncID, MaxLen: 44, Group: ipvs.DefaultSyncGroup, Port: 8848}
	on := Desired{NAT: guarded, Daemons: []ipvs.Daemon{master}}
	kinds := func(ops []Op) []string {
		var out []string
		for _, op := range ops {
			out = append(out, op.Kind.String())
		}
		return out
	}
	ops, _ := Plan(PlanInput{Desired: on})
	if got := kinds(ops); !slices.Equal(got, []string{"replace-nft-tables", "start-daemon"}) {
		t.Errorf("first start: %q, want the guard first", got)
	}
	running := master
	running.TTL = 1
	ops, _ = Plan(PlanInput{Desired: on, Actual: Actual{NATDigest: guarded.Digest(), Daemons: []ipvs.Daemon{running}}})
	if len(ops) != 0 {
		t.Errorf("running as wanted: %q", opStrings(ops))
	}
	// Connection sync off: stop before the guard is removed.
	ops, _ = Plan(PlanInput{Desired: Desired{}, Actual: Actual{NATDigest: guarded.Digest(), Daemons: []ipvs.Daemon{running}}})
	if got := kinds(ops); !slices.Equal(got, []string{"stop-daemon", "remove-nft-tables"}) {
		t.Errorf("sync off: %q", got)
	}
	foreign := running
	foreign.SyncID = 9
	if ops, _ := Plan(PlanInput{Desired: Desired{}, Actual: Actual{Daemons: []ipvs.Daemon{foreign}}}); len(ops) != 0 {
		t.Errorf("another program's daemon: %q", opStrings(ops))
	}
	// A guard that fails to install keeps the daemon from starting.
	errs := Kernel{NAT: failingNAT{nat.NewFake()}, Daemons: ipvs.NewFake()}.Apply(t.Context(), []Op{{Kind: ReplaceNAT, NAT: guarded}, {Kind: StartDaemon, Daemon: master}})
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
	ops := []Op{
		{Kind: AddService, Service: ipvs.Service{ServiceKey: webKey}},
		{Kind: AddAddress, Interface: "eth0", Address: vip},
	}
	intended := Ownership{}.Intend(ops)
	if !slices.Equal(intended.Services, []ipvs.ServiceKey{webKey}) || len(intended.Addresses) != 1 {
		t.Fatalf("intended %+v", intended)
	}
	// A failed add stays claimed: the object may exist, and a claim on a
	// missing one is harmless.
	if after := intended.After(ops, []error{errors.New("boom"), nil}); !after.Equal(intended) {
		t.Errorf("after a failed add: %+v", after)
	}
	del := []Op{{Kind: DeleteService, Service: ipvs.Service{ServiceKey: webKey}}, {Kind: DeleteAddress, Interface: "eth0", Address: vip}}
	if after := intended.After(del, []error{errors.New("busy"), nil}); len(after.Services) != 1 || len(after.Addresses) != 0 {
		t.Errorf("after a failed and a done delete: %+v", after)
	}
	if after := intended.After(del, []error{ipvs.ErrNotFound, nil}); len(after.Services) != 0 {
		t.Errorf("a service found gone leaves the record: %+v", after)
	}
}

// Intend, Adopt and After are pure: the record they start from is never
// written, even where its lists have room to grow in place, and one they
// do not change is handed back as it is (no copy of every key per pass).
func TestOwnershipEditsLeaveTheOriginal(t *testing.T) {
	key := func(port uint16) ipvs.ServiceKey {
		return ipvs.ServiceKey{Protocol: ipvs.TCP, Addr: webKey.Addr, Port: port}
	}
	services := make([]ipvs.ServiceKey, 3, 8) // room to insert in place
	copy(services, []ipvs.ServiceKey{key(80), key(82), key(84)})
	addrs := make([]OwnedAddress, 1, 4)
	addrs[0] = OwnedAddress{"eth0", netip.MustParsePrefix("10.0.0.50/32")}
	o := Ownership{Services: services, Addresses: addrs}
	want := Ownership{Services: slices.Clone(services), Addresses: slices.Clone(addrs)}
	other := OwnedAddress{"eth0", netip.MustParsePrefix("10.0.0.51/32")}

	added := o.Intend([]Op{{Kind: AddService, Service: ipvs.Service{ServiceKey: key(81)}}, {Kind: AddAddress, Interface: other.Interface, Address: other.Prefix}})
	adopted := o.Adopt([]ipvs.ServiceKey{key(83)})
	deleted := o.After([]Op{{Kind: DeleteService, Service: ipvs.Service{ServiceKey: key(80)}}, {Kind: DeleteAddress, Interface: "eth0", Address: addrs[0].Prefix}}, []error{nil, nil})
	if !o.Equal(want) || !slices.Equal(services[:cap(services)][3:], make([]ipvs.ServiceKey, 5)) {
		t.Fatalf("the original changed: %+v (its spare room %v)", o, services[:cap(services)][3:])
	}
	for _, c := range []struct {
		name     string
		got      Ownership
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
	same := o.Adopt([]ipvs.ServiceKey{key(82)}).Intend([]Op{{Kind: AddAddress, Interface: "eth0", Address: addrs[0].Prefix}})
	if &same.Services[0] != &o.Services[0] || &same.Addresses[0] != &o.Addresses[0] {
		t.Errorf("nothing changed, yet the lists were copied")
	}
}

// A VIP whose service could not be added is not served: holding it would
// attract traffic nothing forwards. One already in the kernel is.
func TestServed(t *testing.T) {
	d := Desired{Services: []*VirtualService{{Service: ipvs.Service{ServiceKey: webKey}, VIP: webKey.Addr}},
		VIPs: []VIPAddresses{{VIP: webKey.Addr}}}
	ops := []Op{{Kind: AddService, Service: ipvs.Service{ServiceKey: webKey}}}
	if got := Served(d, Actual{}, ops, []error{errors.New("no memory")}); len(got.VIPs) != 0 {
		t.Errorf("failed add: served %v", got.VIPs)
	}
	if got := Served(d, Actual{}, ops, []error{nil}); len(got.VIPs) != 1 {
		t.Errorf("done: served %v", got.VIPs)
	}
	if got := Served(d, Actual{}, ops, []error{ipvs.ErrExists}); len(got.VIPs) != 1 {
		t.Errorf("already there: served %v", got.VIPs)
	}
}

// The holder keeps the addresses of IPVS services it does not want and the
// plan does not delete; fwmark services have none.
func TestAddressesInUse(t *testing.T) {
	key := func(addr string, port uint16) ipvs.ServiceKey {
		return ipvs.ServiceKey{Protocol: ipvs.TCP, Addr: netip.MustParseAddr(addr), Port: port}
	}
	wanted, draining, deleted, foreign := key("10.0.0.1", 80), key("10.0.0.2", 80), key("10.0.0.3", 80), key("::ffff:10.0.0.4", 443)
	mark := ipvs.ServiceKey{FWMark: 7}
	d := Desired{Services: []*VirtualService{{Service: ipvs.Service{ServiceKey: wanted}}}}
	a := Actual{}
	for _, k := range []ipvs.ServiceKey{wanted, draining, deleted, foreign, mark} {
		a.Services.Set(k, ActualService{Service: ipvs.Service{ServiceKey: k}})
	}
	ops := []Op{{Kind: DeleteService, Service: ipvs.Service{ServiceKey: deleted}}}
	got := AddressesInUse(d, a, ops)
	want := map[netip.Addr]bool{netip.MustParseAddr("10.0.0.2"): true, netip.MustParseAddr("10.0.0.4"): true}
	if !maps.Equal(got, want) {
		t.Errorf("in use %v, want %v", got, want)
	}
}
