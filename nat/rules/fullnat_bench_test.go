package rules_test

import (
	"fmt"
	"net/netip"
	"testing"

	"github.com/lvsd/lvsd/ipvs/l4"
	"github.com/lvsd/lvsd/nat/rules"
)

// fleetSpec has n FULLNAT services sharing the source addresses 10.0.0.70
// and 10.0.0.71, as agent's takeover scale test builds them: one on VIP
// 10.0.0.52 with two ports, the others on 10.0.0.45 with one port each.
func fleetSpec(n int) rules.Spec {
	to := addrs("10.0.0.70", "10.0.0.71")
	spec := rules.Spec{SNAT: []rules.SNATRule{{
		Match:  rules.Match{VIP: addr("10.0.0.52"), Protocol: l4.TCP, Ports: []l4.PortRange{port(5001), port(7001)}},
		CtMark: 1, To: to, Comment: "bench",
	}}}
	for i := range n - 1 {
		spec.SNAT = append(spec.SNAT, rules.SNATRule{
			Match:  rules.Match{VIP: addr("10.0.0.45"), Protocol: l4.TCP, Ports: []l4.PortRange{port(uint16(10000 + i))}},
			CtMark: uint32(2 + i), To: to, Comment: fmt.Sprintf("x%05d", i),
		})
	}
	return spec
}

// fleetConns are 10,000 connections spread over the n services of fleetSpec.
func fleetConns(n int) [][2]netip.AddrPort {
	conns := make([][2]netip.AddrPort, 10000)
	for i := range conns {
		client := netip.AddrPortFrom(netip.AddrFrom4([4]byte{192, 168, byte(i >> 8), byte(i)}), uint16(30000+i))
		vip := netip.AddrPortFrom(addr("10.0.0.52"), 7001)
		if s := i % n; s > 0 {
			vip = netip.AddrPortFrom(addr("10.0.0.45"), uint16(10000+s-1))
		}
		conns[i] = [2]netip.AddrPort{client, vip}
	}
	return conns
}

// BenchmarkFullNATEntry measures one connection's entry (ns/op is per
// connection) among 100 to 10,000 FULLNAT services: a takeover's restore
// asks it once per synced connection, an ECMP director once per flow
// record of its peers.
func BenchmarkFullNATEntry(b *testing.B) {
	backend := ap("10.0.0.11:7001")
	for _, n := range []int{100, 1000, 10000} {
		b.Run(fmt.Sprintf("services=%d", n), func(b *testing.B) {
			rs, err := rules.Render(fleetSpec(n))
			if err != nil {
				b.Fatal(err)
			}
			conns := fleetConns(n)
			rs.FullNATEntry(l4.TCP, conns[0][0], conns[0][1], backend) // an index is built once, not per connection
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				c := conns[i%len(conns)]
				if _, ok := rs.FullNATEntry(l4.TCP, c[0], c[1], backend); !ok {
					b.Fatalf("no entry for %s -> %s", c[0], c[1])
				}
			}
		})
	}
}

// BenchmarkRenderFleet measures Render of n FULLNAT services, and the part
// of it that builds FullNATEntry's index.
func BenchmarkRenderFleet(b *testing.B) {
	for _, n := range []int{100, 1000, 10000} {
		spec := fleetSpec(n)
		b.Run(fmt.Sprintf("services=%d", n), func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				if _, err := rules.Render(spec); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(fmt.Sprintf("index/services=%d", n), func(b *testing.B) {
			rs, err := rules.Render(spec)
			if err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				rs.FullNATIndexBuild()
			}
		})
	}
}
