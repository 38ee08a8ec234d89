package agent

import (
	"math/rand/v2"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/lvsd/lvsd/arp/sysctl"
	"github.com/lvsd/lvsd/ipvs"
)

// dest is the destination 10.0.0.<last>:80 as lvsd wants it.
func dest(last byte, weight int) Destination {
	return Destination{Destination: ipvs.Destination{DestinationKey: ipvs.DestinationKey{Addr: netip.AddrFrom4([4]byte{10, 0, 0, last}), Port: 80},
		Weight: weight}, SlotWeight: max(weight, 1)}
}

func keysOf(dsts []ipvs.Destination) []ipvs.DestinationKey {
	var out []ipvs.DestinationKey
	for _, d := range dsts {
		out = append(out, d.DestinationKey)
	}
	return out
}

func TestCanonicalPrefix(t *testing.T) {
	a, b, c, d := dest(1, 1), dest(2, 1), dest(3, 1), dest(4, 1)
	kernel := func(ds ...Destination) []ipvs.Destination { // head first
		var out []ipvs.Destination
		for _, x := range ds {
			out = append(out, x.Destination)
		}
		return out
	}
	for _, tc := range []struct {
		name   string
		want   []Destination
		kernel []ipvs.Destination
		n      int
	}{
		{"made now: reversed", []Destination{a, b, c}, kernel(c, b, a), 3},
		{"empty", []Destination{a, b}, nil, 0},
		{"one added last", []Destination{a, b, c}, kernel(b, a), 2},
		{"one added in the middle", []Destination{a, b, c}, kernel(c, a), 1},
		{"one added first", []Destination{a, b, c}, kernel(c, b), 0},
		{"a later add went to the head", []Destination{a, b, c, d}, kernel(b, d, c, a), 2},
		{"an unwanted one draining does not count", []Destination{a, c}, kernel(c, b, a), 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if n := canonicalPrefix(tc.want, tc.kernel); n != tc.n {
				t.Errorf("canonicalPrefix = %d, want %d", n, tc.n)
			}
		})
	}
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
		actual := Actual{}
		var drains Drains
		for step := range 8 {
			// A random sorted subset of 8 backends, some ineligible.
			var want []Destination
			for last := byte(1); last <= 8; last++ {
				if r.IntN(3) > 0 {
					want = append(want, dest(last, r.IntN(3)))
				}
			}
			desired := Desired{Services: []*VirtualService{{Service: svc, Destinations: want}}}
			// Connections gone at once: unwanted ones are deleted in
			// two passes (weight 0, then the delete).
			for range 2 {
				var ops []Op
				ops, drains = Plan(PlanInput{Desired: desired, Actual: actual, Drains: drains, Now: t0, SkipGlobals: true})
				actual.apply(ops, make([]error, len(ops)))
			}
			fresh, _ := Plan(PlanInput{Desired: desired, Actual: Actual{}, SkipGlobals: true})
			made := Actual{}
			made.apply(fresh, make([]error, len(fresh)))
			got, wantList := keysOf(actual.Services.At(webKey).Destinations), keysOf(made.Services.At(webKey).Destinations)
			if !slices.Equal(got, wantList) {
				t.Fatalf("run %d step %d: list %v, a director that makes it now has %v", run, step, got, wantList)
			}
			if ops, _ := Plan(PlanInput{Desired: desired, Actual: actual, Drains: drains, Now: t0, SkipGlobals: true}); len(ops) != 0 {
				t.Fatalf("run %d step %d: a second plan: %q", run, step, opStrings(ops))
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
	actual := Actual{Services: tableOf(map[ipvs.ServiceKey]ActualService{webKey: {Service: svc,
		Destinations: []ipvs.Destination{cOld, a.Destination}}})} // c then a: b is new, in the middle
	ops, _ := Plan(PlanInput{Desired: Desired{Services: []*VirtualService{{Service: svc, Destinations: []Destination{a, b, c}}}}, Actual: actual, SkipGlobals: true})
	want := []string{
		"add-destination tcp:10.0.0.50:80 -> 10.0.0.2:80 weight 1 masq",
		"move-destination tcp:10.0.0.50:80 -> 10.0.0.3:80 weight 1 masq (into canonical order)",
		"update-destination tcp:10.0.0.50:80 -> 10.0.0.3:80 weight 0 masq (not eligible)",
	}
	if got := opStrings(ops); !slices.Equal(got, want) {
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
	setup := func() (Kernel, *ipvs.Fake, *sysctl.Fake) {
		fake := ipvs.NewFake()
		sysctls := sysctl.NewFake(map[string]string{ipvs.ExpireNodestConn: "1"})
		for _, err := range []error{fake.AddService(ctx, svc), fake.AddDestination(ctx, webKey, a), fake.AddDestination(ctx, webKey, b)} {
			if err != nil {
				t.Fatal(err)
			}
		}
		fake.Ops() // from here on
		return Kernel{IPVS: fake, Sysctls: sysctls}, fake, sysctls
	}
	move := Op{Kind: MoveDestination, Service: svc, Destination: a}

	k, fake, sysctls := setup()
	if errs := k.Apply(ctx, []Op{move}); errs[0] != nil {
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
	if errs, calls := k.Apply(ctx, []Op{move}), fake.Ops(); errs[0] == nil || len(calls) != 0 {
		t.Errorf("with the sysctl read-only: err %v, ipvs calls %q", errs[0], calls)
	}
}
