package agent

import (
	"context"
	"errors"
	"math/rand/v2"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/lvsd/lvsd/agent/config"
	"github.com/lvsd/lvsd/agent/planner"

	"github.com/lvsd/lvsd/arp/sysctl"
	"github.com/lvsd/lvsd/ipvs"
)

// dest is the destination 10.0.0.<last>:80 as lvsd wants it.
func dest(last byte, weight int) planner.Destination {
	return planner.Destination{From: &config.Backend{Addr: netip.AddrFrom4([4]byte{10, 0, 0, last})}, Port: 80, Weight: uint16(weight), SlotWeight: uint16(max(weight, 1))}
}

// masq is d as the kernel has it in a NAT service.
func masq(d planner.Destination) ipvs.Destination {
	return (&planner.VirtualService{}).Kernel(d)
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

// A destination out of order is moved in one op, between the two that
// hold expire_nodest_conn at 0 and set it back, its weight as wanted; one
// wanted at weight 0 comes back with its slot weight first and is lowered
// once the sysctl is back.
func TestPlanMovesIntoCanonicalOrder(t *testing.T) {
	svc := ipvs.Service{ServiceKey: webKey, Scheduler: "mh"}
	a, b, c := dest(1, 1), dest(2, 1), dest(3, 0)
	cOld := masq(c)
	actual := planner.Actual{Services: planner.NewServiceTable(map[ipvs.ServiceKey]planner.ActualService{webKey: {Service: svc,
		Destinations: []ipvs.Destination{cOld, masq(a)}}})} // c then a: b is new, in the middle
	ops, _ := planner.Plan(planner.PlanInput{Desired: planner.Desired{Services: []*planner.VirtualService{{Service: svc, Destinations: []planner.Destination{a, b, c}}}}, Actual: actual, SkipGlobals: true})
	want := []string{
		"add-destination tcp:10.0.0.50:80 -> 10.0.0.2:80 weight 1 masq",
		"set-sysctl net/ipv4/vs/expire_nodest_conn=0 (was 1) (held across the move of 10.0.0.3:80)",
		"move-destination tcp:10.0.0.50:80 -> 10.0.0.3:80 weight 1 masq (into canonical order)",
		"set-sysctl net/ipv4/vs/expire_nodest_conn=1 (was 0) (set back after the move of 10.0.0.3:80)",
		"update-destination tcp:10.0.0.50:80 -> 10.0.0.3:80 weight 0 masq (not eligible)",
	}
	if got := planner.OpStrings(ops); !slices.Equal(got, want) {
		t.Errorf("ops\n%q\nwant\n%q", got, want)
	}
	if holds := []planner.SysctlHold{ops[1].Hold, ops[2].Hold, ops[3].Hold}; !slices.Equal(holds, []planner.SysctlHold{planner.HoldForMove, planner.NotHeld, planner.ReleaseAfterMove}) {
		t.Errorf("holds %v around the move", holds)
	}
}

// journal records the host's calls of both kinds in one order.
type journal struct{ calls []string }

type journaledIPVS struct {
	ipvs.Interface
	j       *journal
	failAdd error
}

func (i journaledIPVS) DeleteDestination(ctx context.Context, svc ipvs.ServiceKey, d ipvs.DestinationKey) error {
	i.j.calls = append(i.j.calls, "delete "+d.String())
	return i.Interface.DeleteDestination(ctx, svc, d)
}

func (i journaledIPVS) AddDestination(ctx context.Context, svc ipvs.ServiceKey, d ipvs.Destination) error {
	i.j.calls = append(i.j.calls, "add "+d.DestinationKey.String())
	if i.failAdd != nil {
		return i.failAdd
	}
	return i.Interface.AddDestination(ctx, svc, d)
}

type journaledSysctls struct {
	sysctl.Interface
	j *journal
}

func (s journaledSysctls) Set(ctx context.Context, key, value string) error {
	s.j.calls = append(s.j.calls, "set "+key+"="+value)
	return s.Interface.Set(ctx, key, value)
}

// Applied, a move's ops hold expire_nodest_conn at 0 across the delete and
// the add (else the delete queues the expiry of the destination's
// connections) and set it back even when the move fails; nothing moves,
// and nothing is set back, when the sysctl cannot be held.
func TestKernelMove(t *testing.T) {
	ctx := t.Context()
	svc := ipvs.Service{ServiceKey: webKey, Scheduler: "mh"}
	a, b := dest(1, 1), dest(2, 1)
	setup := func(failAdd error) (Kernel, *ipvs.Fake, *sysctl.Fake, *journal) {
		fake := ipvs.NewFake()
		sysctls := sysctl.NewFake(map[string]string{ipvs.ExpireNodestConn: "1"})
		for _, err := range []error{fake.AddService(ctx, svc), fake.AddDestination(ctx, webKey, masq(a)), fake.AddDestination(ctx, webKey, masq(b))} {
			if err != nil {
				t.Fatal(err)
			}
		}
		j := &journal{}
		return Kernel{IPVS: journaledIPVS{fake, j, failAdd}, Sysctls: journaledSysctls{sysctls, j}}, fake, sysctls, j
	}
	move := planner.AppendMove(nil, &planner.VirtualService{Service: svc}, a)
	hold, release := "set "+ipvs.ExpireNodestConn+"=0", "set "+ipvs.ExpireNodestConn+"=1"

	k, fake, _, j := setup(nil)
	if err := errors.Join(k.Apply(ctx, move)...); err != nil {
		t.Fatal(err)
	}
	if want := []string{hold, "delete 10.0.0.1:80", "add 10.0.0.1:80", release}; !slices.Equal(j.calls, want) {
		t.Errorf("calls %q, want %q", j.calls, want)
	}
	if dsts, _ := fake.Destinations(ctx, webKey); !slices.Equal(keysOf(dsts), []ipvs.DestinationKey{a.Key(), b.Key()}) {
		t.Errorf("list %v, want a at the head", keysOf(dsts))
	}

	k, _, _, j = setup(errors.New("no memory"))
	errs := k.Apply(ctx, move)
	if errs[0] != nil || errs[1] == nil || errs[2] != nil {
		t.Errorf("a failed add: errors %v, want the move's only", errs)
	}
	if want := []string{hold, "delete 10.0.0.1:80", "add 10.0.0.1:80", release}; !slices.Equal(j.calls, want) {
		t.Errorf("a failed add: calls %q, want the sysctl set back all the same", j.calls)
	}

	k, _, sysctls, j := setup(nil)
	sysctls.SetReadOnly(ipvs.ExpireNodestConn)
	errs = k.Apply(ctx, move)
	if !errors.Is(errs[0], sysctl.ErrReadOnly) || errs[1] == nil || errs[2] == nil {
		t.Errorf("with the sysctl read-only: errors %v, want all three to fail", errs)
	}
	if len(j.calls) != 1 || j.calls[0] != hold {
		t.Errorf("with the sysctl read-only: calls %q, want only the hold tried", j.calls)
	}
}
