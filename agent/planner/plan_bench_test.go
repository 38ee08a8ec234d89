package planner

import (
	"fmt"
	"net/netip"
	"slices"
	"testing"

	"github.com/lvsd/lvsd/agent/config"
	"github.com/lvsd/lvsd/ipvs/l4"
	ipvs "github.com/lvsd/lvsd/ipvs/spec"
)

// BenchmarkPlanInPlace: planning services × 10 destinations that the
// kernel has as wanted, which plans nothing: what a full pass or an audit
// step spends besides reading the kernel. allocs/op should stay a few per
// service.
func BenchmarkPlanInPlace(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		b.Run(fmt.Sprintf("services=%d", n), func(b *testing.B) {
			var d Desired
			var a Actual
			for i := range n {
				vs := &VirtualService{Name: fmt.Sprintf("s%05d", i), Service: ipvs.Service{Scheduler: "mh",
					ServiceKey: ipvs.ServiceKey{Protocol: l4.TCP, Addr: netip.AddrFrom4([4]byte{10, 0, byte(i / 256), byte(i)}), Port: 80}},
					Forwarding: ipvs.DirectRoute}
				var kernel []ipvs.Destination
				for j := range 10 {
					dst := ipvs.Destination{DestinationKey: ipvs.DestinationKey{Addr: netip.AddrFrom4([4]byte{10, 1, byte(i % 250), byte(j + 1)}), Port: 80},
						Weight: 1, Forwarding: ipvs.DirectRoute}
					vs.Destinations = append(vs.Destinations, Destination{From: &config.Backend{Addr: dst.Addr}, Port: dst.Port, Weight: uint16(dst.Weight), SlotWeight: 1})
					kernel = append(kernel, dst)
				}
				slices.Reverse(kernel) // the kernel adds at the head
				d.Services = append(d.Services, vs)
				a.Services.Set(vs.ServiceKey, ActualService{Service: vs.Service, Destinations: kernel})
			}
			slices.SortFunc(d.Services, func(x, y *VirtualService) int { return x.ServiceKey.Compare(y.ServiceKey) })
			in := PlanInput{Desired: d, Actual: a, SkipGlobals: true}
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				if ops, _ := Plan(in); len(ops) != 0 {
					b.Fatalf("planned %d ops, first %s; want none", len(ops), ops[0])
				}
			}
		})
	}
}

// destinationIndex finds every destination where it is, and none that is
// not there, whether it scans the list or maps it.
func TestDestinationIndex(t *testing.T) {
	for _, n := range []int{0, 1, scannedList, scannedList + 1, 40} {
		var list []ipvs.Destination
		for i := range n {
			list = append(list, ipvs.Destination{DestinationKey: ipvs.DestinationKey{Addr: netip.AddrFrom4([4]byte{10, 0, 0, byte(i + 1)}), Port: 80}})
		}
		at := destinationIndex(list, kernelKey)
		for i, d := range list {
			if got := at(d.DestinationKey); got != i {
				t.Errorf("%d destinations: %s at %d, want %d", n, d.DestinationKey, got, i)
			}
		}
		missing := ipvs.DestinationKey{Addr: netip.MustParseAddr("10.0.0.1"), Port: 81}
		if got := at(missing); got != -1 {
			t.Errorf("%d destinations: %s (not there) at %d, want -1", n, missing, got)
		}
	}
}
