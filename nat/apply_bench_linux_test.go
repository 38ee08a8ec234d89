package nat

import (
	"context"
	"fmt"
	"net/netip"
	"testing"

	"github.com/lvsd/lvsd/ipvs/l4"
)

// BenchmarkKernelApplyFullNAT is the time to write the tables of 10,000
// FULLNAT services (distinct VIPs and ports, ct marks, two SNAT ranges)
// into a network namespace that has none: a start or a reload.
//
//	sudo go test -run '^$' -bench KernelApplyFullNAT ./nat/
func BenchmarkKernelApplyFullNAT(b *testing.B) {
	if testing.Short() {
		b.Skip("builds a network namespace")
	}
	ctx := context.Background()
	ns := newTestNS(b)
	k := NewKernel(InNetNS(ns.fd))
	var spec Spec
	for i := range 10000 {
		vip := netip.AddrFrom4([4]byte{198, 18, byte(i / 250), byte(1 + i%250)})
		to := []netip.Addr{netip.MustParseAddr("10.99.0.100"), netip.MustParseAddr("10.99.0.101")}
		if i%2 == 1 {
			to = to[1:]
		}
		spec.SNAT = append(spec.SNAT, SNATRule{
			Match:  Match{VIP: vip, Protocol: l4.TCP, Ports: []l4.PortRange{{From: uint16(80 + i%3), To: uint16(80 + i%3)}}},
			CtMark: 0x10000000 + uint32(i), To: to, Comment: fmt.Sprintf("svc%05d", i),
		})
	}
	rs, err := Render(spec)
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		if err := k.Remove(ctx); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		if err := k.Apply(ctx, rs); err != nil {
			b.Fatal(err)
		}
	}
}
