package agent

import (
	"math/rand/v2"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/lvsd/lvsd/agent/planner"

	"github.com/lvsd/lvsd/arp"
	"github.com/lvsd/lvsd/ipvs"
)

// dest is the destination 10.0.0.<last>:80 as lvsd wants it.
func dest(last byte, weight int) planner.Destination {
	return planner.Destination{Destination: ipvs.Destination{DestinationKey: ipvs.DestinationKey{Addr: netip.AddrFrom4([4]byte{10, 0, 0, last}), Port: 80},
		Weight: weight}, SlotWeight: max(weight, 1)}
}

func keysOf(dsts []ipvs.Destination) []ipvs.DestinationKey {
	var out []ipvs.DestinationKey
	for _, d := range dsts {
		out = append(out, d.DestinationKey)
	}
	return out
}

// Whatever the history of a service's backends (added, removed, taken
// out and back, in any order), the kernel's list after lvsd's plan is the
// list a director that makes the service now builds: the same Maglev
// table on every director. A second plan finds nothing to do.
func TestDestinationOrderIndependentOfHistory(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	svc := ipvs.Service{ServiceKey: webKey, Scheduler: "mh"}
	t0 := time.Unix(1000, 0)
	for run := range 200 {
		actual := planner.Actual{}
		var drains planner.Drains
		for step := range 8 {
			// A random sorted subset of 8 backends, some ineligible.
			var want []planner.Destination
			for last := byte(1); last <= 8; last++ {
				if r.IntN(3) > 0 {
					want = append(want, dest(last, r.IntN(3)))
				}
			}
			desired := planner.Desired{Services: []*planner.VirtualService{{Service: svc, Destinations: want}}}
			// Connections gone at once: unwanted ones are deleted in
			// two passes (weight 0, then the delete).
			for range 2 {
				var ops []planner.Op
				ops, drains = planner.Plan(planner.PlanInput{Desired: desired, Actual: actual, Drains: drains, Now: t0, SkipGlobals: true})
				actual.Applied(ops, make([]error, len(ops)))
			}
			fresh, _ := planner.Plan(planner.PlanInput{Desired: desired, Actual: planner.Actual{}, SkipGlobals: true})
			made := planner.Actual{}
			made.Applied(fresh, make([]error, len(fresh)))
			got, wantList := keysOf(actual.Services.At(webKey).Destinations), keysOf(made.Services.At(webKey).Destinations)
			if !slices.Equal(got, wantList) {
				t.Fatalf("run %d step %d: list %v, a director that makes it now has %v", run, step, got, wantList)
			}
			if ops, _ := planner.Plan(planner.PlanInput{Desired: desired, Actual: actual, Drains: drains, Now: t0, SkipGlobals: true}); len(ops) != 0 {
				t.Fatalf("run %d step %d: a second plan: %q", run, step, planner.OpStrings(ops))
			}
		}
	}
}

// A destination out of order is moved in one op (Kernel.move holds
// expire_nodest_conn around its delete and add), its weight as wanted;
// one wanted at weight 0 comes back with its slot weight first.
func TestPlanMovesIntoCanonicalOrder(t *testing.T) {
	svc := ipvs.Service{ServiceKey: webKey, Scheduler: "mh"}
	a, b, c := dest(1, 1), dest(2, 1), dest(3, 0)
	cOld := c.Destination
	actual := planner.Actual{Services: planner.NewServiceTable(map[ipvs.ServiceKey]planner.ActualService{webKey: {Service: svc,
		Destinations: []ipvs.Destination{cOld, a.Destination}}})} // c then a: b is new, in the middle
	ops, _ := planner.Plan(planner.PlanInput{Desired: planner.Desired{Services: []*planner.VirtualService{{Service: svc, Destinations: []planner.Destination{a, b, c}}}}, Actual: actual, SkipGlobals: true})
	want := []string{
		"add-destination tcp:10.0.0.50:80 -> 10.0.0.2:80 weight 1 masq",
		"move-destination tcp:10.0.0.50:80 -> 10.0.0.3:80 weight 1 masq (into canonical order)",
		"update-destination tcp:10.0.0.50:80 -> 10.0.0.3:80 weight 0 masq (not eligible)",
	}
	if got := planner.OpStrings(ops); !slices.Equal(got, want) {
		t.Errorf("ops\n%q\nwant\n%q", got, want)
	}
}

// Kernel.move holds expire_nodest_conn at 0 across the delete and the add
// (else the delete queues the expiry of the destination's connections),
// and moves nothing when it cannot hold it.
func TestKernelMove(t *testing.T) {
	ctx := t.Context()
	svc := ipvs.Service{ServiceKey: webKey, Scheduler: "mh"}
	a, b := dest(1, 1).Destination, dest(2, 1).Destination
	setup := func() (Kernel, *ipvs.Fake, *arp.FakeSysctls) {
		fake := ipvs.NewFake()
		sysctls := arp.NewFakeSysctls(map[string]string{ipvs.ExpireNodestConn: "1"})
		for _, err := range []error{fake.AddService(ctx, svc), fake.AddDestination(ctx, webKey, a), fake.AddDestination(ctx, webKey, b)} {
			if err != nil {
				t.Fatal(err)
			}
		}
		fake.Ops() // from here on
		return Kernel{IPVS: fake, Sysctls: sysctls}, fake, sysctls
	}
	move := planner.Op{Kind: planner.MoveDestination, Service: svc, Destination: a}

	k, fake, sysctls := setup()
	if errs := k.Apply(ctx, []planner.Op{move}); errs[0] != nil {
		t.Fatal(errs[0])
	}
	if got, want := sysctls.Ops(), []string{"set " + ipvs.ExpireNodestConn + "=0", "set " + ipvs.ExpireNodestConn + "=1"}; !slices.Equal(got, want) {
		t.Errorf("sysctl writes %q, want %q", got, want)
	}
	if got := fake.Ops(); !slices.Equal(got, []string{
		"delete-destination tcp:10.0.0.50:80 10.0.0.1:80", "add-destination tcp:10.0.0.50:80 10.0.0.1:80 weight=1 masq"}) {
		t.Errorf("ipvs calls %q", got)
	}
	if dsts, _ := fake.Destinations(ctx, webKey); !slices.Equal(keysOf(dsts), []ipvs.DestinationKey{a.DestinationKey, b.DestinationKey}) {
		t.Errorf("list %v, want a at the head", keysOf(dsts))
	}

	k, fake, sysctls = setup()
	sysctls.SetReadOnly(ipvs.ExpireNodestConn)
	if errs, calls := k.Apply(ctx, []planner.Op{move}), fake.Ops(); errs[0] == nil || len(calls) != 0 {
		t.Errorf("with the sysctl read-only: err %v, ipvs calls %q", errs[0], calls)
	}
}
