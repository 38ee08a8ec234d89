package agent

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/lvsd/lvsd/agent/planner"
	"github.com/lvsd/lvsd/ipvs"
)

func TestPassParts(t *testing.T) {
	keys := func(n int) []ipvs.ServiceKey {
		out := make([]ipvs.ServiceKey, n)
		for i := range out {
			out[i] = ipvs.ServiceKey{FWMark: uint32(i + 1)}
		}
		return out
	}
	for _, c := range []struct {
		n     int
		all   bool
		sizes []int // nil part: every service
	}{
		{0, true, []int{-1}},
		{0, false, []int{0}},
		{passPart, true, []int{-1}},
		{passPart, false, []int{passPart}},
		{passPart + 1, true, []int{passPart, 1}},
		{2*passPart + 7, false, []int{passPart, passPart, 7}},
	} {
		k := keys(c.n)
		parts := passParts(k, c.all)
		var sizes []int
		var joined []ipvs.ServiceKey
		for _, p := range parts {
			if p == nil {
				sizes = append(sizes, -1)
				continue
			}
			sizes = append(sizes, len(p))
			joined = append(joined, p...)
		}
		if !slices.Equal(sizes, c.sizes) {
			t.Errorf("%d keys, all %v: parts of %v, want %v", c.n, c.all, sizes, c.sizes)
		}
		if len(parts) > 1 && !slices.Equal(joined, k) {
			t.Errorf("%d keys, all %v: the parts are not the keys in order", c.n, c.all)
		}
	}
}

// A cold start of more services than a pass plans at once makes them all,
// in the order one plan would (every service, then its destinations,
// by key), claims them all with one write of the record, counts every op, keeps only those needed after
// it, and leaves nothing for the next full pass to do. That full pass runs
// in parts too, and drops drain records of services it did not plan.
func TestColdStartInParts(t *testing.T) {
	const n = 2*passPart + 500
	e := newEnv(t)
	for i := range n {
		var b strings.Builder
		fmt.Fprintf(&b, "service: s%05d\nvip: 10.0.%d.1\nports: [%d]\nbackends:\n", i, i/1000, 1000+i%1000)
		for j := range 3 {
			fmt.Fprintf(&b, "  - {address: 10.1.0.%d}\n", j+1)
		}
		e.service(fmt.Sprintf("s%05d", i), b.String())
	}
	a := e.agent()
	ops, counts := a.reconcile(t.Context())

	if counts[planner.AddService] != n || counts[planner.AddDestination] != 3*n {
		t.Errorf("counted %s; want add-service=%d add-destination=%d", counts, n, 3*n)
	}
	if i := slices.IndexFunc(ops, func(op planner.Op) bool { return !keptAfterPart(op, nil) }); i >= 0 {
		t.Errorf("kept %s, which nothing needs after the pass", ops[i])
	}
	var want []string
	for _, vs := range a.desired.Services {
		want = append(want, "add-service "+vs.ServiceKey.String())
		for _, d := range vs.Destinations {
			want = append(want, fmt.Sprintf("add-destination %s %s", vs.ServiceKey, d.Key()))
		}
	}
	var got []string
	for _, op := range e.ipvs.Ops() {
		switch f := strings.Fields(op); f[0] {
		case "add-service":
			got = append(got, strings.Join(f[:2], " "))
		case "add-destination":
			got = append(got, strings.Join(f[:3], " "))
		}
	}
	if !slices.Equal(got, want) {
		t.Errorf("the kernel was given %d adds, want %d in one plan's order; first difference at %d", len(got), len(want), firstDifference(got, want))
	}
	if len(a.owned.Services) != n {
		t.Errorf("claimed %d services, want %d", len(a.owned.Services), n)
	}
	if a.ownedSaves != 1 {
		t.Errorf("the ownership record was written %d times, want once for the whole pass", a.ownedSaves)
	}
	if a.actual.Services.Len() != n {
		t.Errorf("the view of the kernel has %d services, want %d", a.actual.Services.Len(), n)
	}

	stale := planner.DrainKey{Service: ipvs.ServiceKey{Addr: netip.MustParseAddr("192.0.2.1"), Port: 80, Protocol: 6},
		Destination: ipvs.DestinationKey{Addr: netip.MustParseAddr("192.0.2.2"), Port: 80}}
	a.drains[stale] = e.now
	a.Resync(t.Context())
	if calls := e.ipvs.Ops(); len(calls) != 0 {
		t.Errorf("the full pass after the start changed %d things, first %q; want none", len(calls), calls[0])
	}
	if _, ok := a.drains[stale]; ok {
		t.Error("the full pass kept the drain record of a service it did not plan")
	}
}

// firstDifference is the first index where a and b differ.
func firstDifference(a, b []string) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}
