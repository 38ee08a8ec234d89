package planner

import (
	"net/netip"
	"testing"

	"github.com/lvsd/lvsd/agent/config"
	ipvs "github.com/lvsd/lvsd/ipvs/spec"
)

func TestCanonicalPrefix(t *testing.T) {
	a, b, c, d := dest(1, 1), dest(2, 1), dest(3, 1), dest(4, 1)
	kernel := func(ds ...Destination) []ipvs.Destination { // head first
		var out []ipvs.Destination
		for _, x := range ds {
			out = append(out, ipvs.Destination{DestinationKey: x.Key(), Weight: int(x.Weight)})
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

// dest is the destination 10.0.0.<last>:80 as lvsd wants it.
func dest(last byte, weight int) Destination {
	return Destination{From: &config.Backend{Addr: netip.AddrFrom4([4]byte{10, 0, 0, last})}, Port: 80, Weight: uint16(weight), SlotWeight: uint16(max(weight, 1))}
}
