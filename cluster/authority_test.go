package cluster

import (
	"net/netip"
	"testing"
	"time"
)

func TestAuthority(t *testing.T) {
	v1, v2 := netip.MustParseAddr("10.0.0.50"), netip.MustParseAddr("10.0.0.51")
	var a authority
	t0 := time.Unix(1000, 0)
	a.set("a", map[netip.Addr]bool{v1: true, v2: false}, t0)
	a.set("b", map[netip.Addr]bool{v1: false, v2: true}, t0)
	check := func(when string, now time.Time, want map[string][]bool) {
		t.Helper()
		for sender, w := range want {
			for i, vip := range []netip.Addr{v1, v2} {
				if got := a.maySend(sender, vip, now); got != w[i] {
					t.Errorf("%s: %s may send %s: %v, want %v", when, sender, vip, got, w[i])
				}
			}
		}
	}
	check("held", t0, map[string][]bool{"a": {true, false}, "b": {false, true}, "c": {false, false}})
	// a hands v1 to b: a's late records are still taken for a moment.
	t1 := t0.Add(time.Minute)
	a.set("a", map[netip.Addr]bool{v1: false, v2: false}, t1)
	a.set("b", map[netip.Addr]bool{v1: true, v2: true}, t1)
	check("just released", t1.Add(releaseGrace), map[string][]bool{"a": {true, false}, "b": {true, true}})
	check("released", t1.Add(releaseGrace+time.Millisecond), map[string][]bool{"a": {false, false}, "b": {true, true}})
	// b leaves (nil claims), then takes v2 again.
	a.set("b", nil, t1.Add(time.Hour))
	check("left", t1.Add(time.Hour+2*releaseGrace), map[string][]bool{"b": {false, false}})
	a.set("b", map[netip.Addr]bool{v2: true}, t1.Add(2*time.Hour))
	check("back", t1.Add(2*time.Hour), map[string][]bool{"b": {false, true}})
	if a.maySend("b", netip.AddrFrom16(v2.As16()), t1.Add(2*time.Hour)) != true {
		t.Error("an IPv4-mapped VIP is not the VIP")
	}
}
