package agent

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lvsd/lvsd/agent/planner"
	"github.com/lvsd/lvsd/ipvs/l4"

	"github.com/lvsd/lvsd/ipvs"
)

// concurrencyIPVS counts the writes in flight; the first write waits for a
// second one to start (up to a second), so that a spread run shows.
type concurrencyIPVS struct {
	*ipvs.Fake
	inFlight, most atomic.Int32
	first          sync.Once
	second         chan struct{}
	secondOnce     sync.Once
}

func (c *concurrencyIPVS) enter() func() {
	n := c.inFlight.Add(1)
	for m := c.most.Load(); n > m && !c.most.CompareAndSwap(m, n); m = c.most.Load() {
	}
	if n >= 2 {
		c.secondOnce.Do(func() { close(c.second) })
	}
	c.first.Do(func() {
		select {
		case <-c.second:
		case <-time.After(time.Second):
		}
	})
	return func() { c.inFlight.Add(-1) }
}

func (c *concurrencyIPVS) AddService(ctx context.Context, s ipvs.Service) error {
	defer c.enter()()
	return c.Fake.AddService(ctx, s)
}

func (c *concurrencyIPVS) AddDestination(ctx context.Context, k ipvs.ServiceKey, d ipvs.Destination) error {
	defer c.enter()()
	return c.Fake.AddDestination(ctx, k, d)
}

// spreadOps adds n services of three destinations each, then adds a
// destination to a service that is not there and deletes one that is not
// there either.
func spreadOps(n int) []planner.Op {
	var ops []planner.Op
	for i := range n {
		key := ipvs.ServiceKey{Addr: netip.AddrFrom4([4]byte{10, 1, byte(i >> 8), byte(i)}), Protocol: l4.TCP, Port: 80}
		ops = append(ops, planner.Op{Kind: planner.AddService, Service: ipvs.Service{ServiceKey: key, Scheduler: "mh"}})
		for d := range 3 {
			ops = append(ops, planner.Op{Kind: planner.AddDestination, Service: ipvs.Service{ServiceKey: key},
				Destination: ipvs.Destination{DestinationKey: ipvs.DestinationKey{Addr: netip.AddrFrom4([4]byte{10, 2, byte(i), byte(d + 1)}), Port: 80}, Weight: 1}})
		}
	}
	missing := ipvs.ServiceKey{Addr: netip.MustParseAddr("10.9.9.9"), Protocol: l4.TCP, Port: 80}
	return append(ops,
		planner.Op{Kind: planner.AddDestination, Service: ipvs.Service{ServiceKey: missing},
			Destination: ipvs.Destination{DestinationKey: ipvs.DestinationKey{Addr: netip.MustParseAddr("10.2.0.1"), Port: 80}}},
		planner.Op{Kind: planner.DeleteService, Service: ipvs.Service{ServiceKey: missing}})
}

func kernelTable(t *testing.T, f *ipvs.Fake) []string {
	t.Helper()
	ctx := context.Background()
	svcs, err := f.Services(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, s := range svcs {
		dsts, err := f.Destinations(ctx, s.ServiceKey)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, fmt.Sprint(s, dsts)) // destinations in the kernel's list order
	}
	slices.Sort(out)
	return out
}

func errorTexts(errs []error) []string {
	out := make([]string, len(errs))
	for i, err := range errs {
		if err != nil {
			out[i] = err.Error()
		}
	}
	return out
}

// A long run of IPVS writes spread over several writers ends in the same
// table, with the same error at the same op, as the run in order.
func TestApplySpreadEqualsInOrder(t *testing.T) {
	ctx := context.Background()
	ops := spreadOps(100)
	inOrder := ipvs.NewFake()
	wantErrs := Kernel{IPVS: inOrder}.Apply(ctx, ops)

	spread := &concurrencyIPVS{Fake: ipvs.NewFake(), second: make(chan struct{})}
	gotErrs := Kernel{IPVS: spread, IPVSWriters: 4}.Apply(ctx, ops)

	if got := spread.most.Load(); got < 2 {
		t.Errorf("at most %d write in flight, want the run spread over several writers", got)
	}
	if !slices.Equal(errorTexts(gotErrs), errorTexts(wantErrs)) {
		t.Errorf("errors differ:\n got %q\nwant %q", errorTexts(gotErrs), errorTexts(wantErrs))
	}
	if wantErrs[len(ops)-2] == nil || wantErrs[len(ops)-1] != nil {
		t.Errorf("the in-order run's last errors = %v, %v; want a failed add and an ignored delete", wantErrs[len(ops)-2], wantErrs[len(ops)-1])
	}
	if got, want := kernelTable(t, spread.Fake), kernelTable(t, inOrder); !slices.Equal(got, want) {
		t.Errorf("tables differ: %d services spread, %d in order", len(got), len(want))
	}
}

// A short run (a reload's few writes) goes one at a time in the plan's
// order, whatever the number of writers.
func TestApplyShortRunInOrder(t *testing.T) {
	ctx := context.Background()
	ops := spreadOps(3)
	if len(ops) >= minSpread {
		t.Fatalf("%d ops is not a short run", len(ops))
	}
	inOrder, spread := ipvs.NewFake(), ipvs.NewFake()
	Kernel{IPVS: inOrder}.Apply(ctx, ops)
	Kernel{IPVS: spread, IPVSWriters: 4}.Apply(ctx, ops)
	if got, want := spread.Ops(), inOrder.Ops(); !slices.Equal(got, want) {
		t.Errorf("ops = %q\nwant %q", got, want)
	}
}
