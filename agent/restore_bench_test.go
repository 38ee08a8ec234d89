package agent

import (
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/lvsd/lvsd/agent/planner"
	"github.com/lvsd/lvsd/ipvs"
	"github.com/lvsd/lvsd/ipvs/l4"
	"github.com/lvsd/lvsd/nat"
)

// BenchmarkRestoreEntries measures a takeover's restore of 10,000 synced
// FULLNAT connections among n FULLNAT services sharing their source
// addresses (one VIP with two ports, another with one port per service, as
// fullNATFleet writes them): ns/op is per connection. The restore runs
// before the VIPs' addresses are added, so it lengthens the failover.
func BenchmarkRestoreEntries(b *testing.B) {
	v45, v52 := netip.MustParseAddr("10.0.0.45"), netip.MustParseAddr("10.0.0.52")
	to := []netip.Addr{netip.MustParseAddr("10.0.0.70"), netip.MustParseAddr("10.0.0.71")}
	for _, n := range []int{100, 1000, 10000} {
		b.Run(fmt.Sprintf("services=%d", n), func(b *testing.B) {
			spec := nat.Spec{SNAT: []nat.SNATRule{{
				Match:  nat.Match{VIP: v52, Protocol: l4.TCP, Ports: []l4.PortRange{{From: 5001, To: 5001}, {From: 7001, To: 7001}}},
				CtMark: planner.FirewallMark("fullnat bench"), To: to, Comment: "bench",
			}}}
			for i := range n - 1 {
				p := uint16(10000 + i)
				spec.SNAT = append(spec.SNAT, nat.SNATRule{
					Match:  nat.Match{VIP: v45, Protocol: l4.TCP, Ports: []l4.PortRange{{From: p, To: p}}},
					CtMark: planner.FirewallMark(fmt.Sprintf("fullnat x%05d", i)), To: to, Comment: fmt.Sprintf("x%05d", i),
				})
			}
			rs, err := nat.Render(spec)
			if err != nil {
				b.Fatal(err)
			}
			conns := make([]ipvs.Connection, 10000)
			for i := range conns {
				vip := netip.AddrPortFrom(v52, 7001)
				if s := i % n; s > 0 {
					vip = netip.AddrPortFrom(v45, uint16(10000+s-1))
				}
				conns[i] = ipvs.Connection{Protocol: l4.TCP, Virtual: vip, State: "ESTABLISHED", Expires: 15 * time.Minute,
					Client: netip.AddrPortFrom(netip.AddrFrom4([4]byte{192, 168, byte(i >> 8), byte(i)}), uint16(30000+i)),
					Dest:   netip.MustParseAddrPort("10.0.0.11:7001")}
			}
			vips := []netip.Addr{v45, v52}
			restoreEntries(rs, conns[:1], vips) // an index is built once, not per takeover
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if entries, _ := restoreEntries(rs, conns, vips); len(entries) != len(conns) {
					b.Fatalf("%d entries of %d connections", len(entries), len(conns))
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(conns)), "ns/conn")
		})
	}
}
