package rules

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/lvsd/lvsd/ipvs/l4"
)

// conflictsPairwise is the model conflicts must agree with: it compares
// every pair of entries.
func conflictsPairwise(what string, es []entry) []error {
	var errs []error
	for i, a := range es {
		for _, b := range es[i+1:] {
			if a.value == b.value || a.fam != b.fam || a.vip != b.vip || a.proto != b.proto ||
				a.bits != b.bits || !portsOverlap(a.ports, b.ports) {
				continue
			}
			if shared, ok := firstShared(a.srcs, b.srcs); ok || a.bits < 0 {
				from := "every client"
				if ok {
					from = "clients in " + shared.String()
				}
				errs = append(errs, fmt.Errorf("%s and %s both match %s %s from %s with different %ss (0x%x, 0x%x)",
					a.name, b.name, a.proto, a.vip, from, what, a.value, b.value))
			}
		}
	}
	return errs
}

func errTexts(errs []error) []string {
	out := make([]string, len(errs))
	for i, err := range errs {
		out[i] = err.Error()
	}
	return out
}

// randomConflictSpec makes a spec from small pools, so that rules often
// share a VIP, protocol, ports and source prefixes with different (or the
// same) marks.
func randomConflictSpec(r *rand.Rand) Spec {
	vips := []netip.Addr{netip.MustParseAddr("198.51.100.1"), netip.MustParseAddr("198.51.100.2"), netip.MustParseAddr("2001:db8::1")}
	src4 := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("10.1.0.0/16"),
		netip.MustParsePrefix("10.1.2.0/24"), netip.MustParsePrefix("10.1.3.0/24"), netip.MustParsePrefix("10.1.2.7/32")}
	src6 := []netip.Prefix{netip.MustParsePrefix("2001:db8:a::/48"), netip.MustParsePrefix("2001:db8:a:1::/64"),
		netip.MustParsePrefix("2001:db8:a:2::/64"), netip.MustParsePrefix("2001:db8:b::/48")}
	protos := []l4.Protocol{l4.Any, l4.TCP, l4.UDP, l4.SCTP}
	portSets := [][]l4.PortRange{nil, {{From: 80, To: 80}}, {{From: 80, To: 80}, {From: 443, To: 443}},
		{{From: 8000, To: 8099}}, {{From: 70, To: 90}, {From: 65535, To: 65535}}, {{From: 81, To: 81}, {From: 8099, To: 8200}},
		{{From: 1, To: 65535}}, {{From: 443, To: 443}, {From: 444, To: 445}}}
	match := func() Match {
		m := Match{VIP: vips[r.IntN(len(vips))], Protocol: protos[r.IntN(len(protos))]}
		if m.Protocol != l4.Any {
			m.Ports = portSets[r.IntN(len(portSets))]
		}
		pool := src4
		if m.VIP.Is6() {
			pool = src6
		}
		for range r.IntN(4) {
			m.Sources = append(m.Sources, pool[r.IntN(len(pool))])
		}
		return m
	}
	var spec Spec
	for i := range r.IntN(12) {
		spec.Marks = append(spec.Marks, MarkRule{Match: match(), Mark: uint32(1 + r.IntN(4)), Comment: fmt.Sprint("m", i)})
	}
	for range r.IntN(12) {
		m := match()
		to := []netip.Addr{netip.MustParseAddr("192.0.2.1")}
		if m.VIP.Is6() {
			to = []netip.Addr{netip.MustParseAddr("2001:db8:ffff::1")}
		}
		spec.SNAT = append(spec.SNAT, SNATRule{Match: m, CtMark: uint32(0x10 + r.IntN(4)), To: to})
	}
	return spec
}

// TestConflictsAgreeWithPairwise checks that conflicts finds what comparing
// every pair finds, in the same order, for random specs full of conflicts
// and for random orders of their entries.
func TestConflictsAgreeWithPairwise(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 8))
	withConflicts, withSources := 0, 0
	for range 5000 {
		c, _ := collect(randomConflictSpec(r))
		for _, k := range []struct {
			what string
			es   []entry
		}{{"packet mark", c.marks}, {"ct mark", c.snats}} {
			for shuffle := range 2 {
				es := slices.Clone(k.es)
				if shuffle == 1 {
					r.Shuffle(len(es), func(i, j int) { es[i], es[j] = es[j], es[i] })
				}
				got, want := errTexts(conflicts(k.what, es)), errTexts(conflictsPairwise(k.what, es))
				if !slices.Equal(got, want) {
					t.Fatalf("conflicts of %d entries:\n got %q\nwant %q", len(es), got, want)
				}
				if len(want) > 0 {
					withConflicts++
					if slices.ContainsFunc(want, func(s string) bool { return strings.Contains(s, "clients in ") }) {
						withSources++
					}
				}
			}
		}
	}
	if withConflicts < 2000 || withSources < 500 {
		t.Errorf("only %d random entry lists had conflicts, %d between source prefixes: the generator makes too few", withConflicts, withSources)
	}
}

// TestConflictsFleet checks the sweep at the scale it exists for: 10,000
// one-port services on one VIP, without and with one clash.
func TestConflictsFleet(t *testing.T) {
	vip := netip.MustParseAddr("10.0.0.45")
	var es []entry
	for i := range 10000 {
		es = append(es, entry{fam: IPv4, name: fmt.Sprint("snat rule ", i), vip: vip, proto: l4.TCP,
			ports: []l4.PortRange{{From: uint16(10000 + i), To: uint16(10000 + i)}}, bits: -1, value: uint32(2 + i)})
	}
	if errs := conflicts("ct mark", es); errs != nil {
		t.Fatalf("distinct ports conflict: %v", errs)
	}
	clash := es[7]
	clash.name, clash.value = "snat rule clash", 1
	es = append(es, clash)
	got := errTexts(conflicts("ct mark", es))
	want := []string{"snat rule 7 and snat rule clash both match tcp 10.0.0.45 from every client with different ct marks (0x9, 0x1)"}
	if !slices.Equal(got, want) {
		t.Errorf("got %q, want %q", got, want)
	}
}

// TestConflictErrorsStable checks that Render reports the conflicts of two
// rules with several prefix lengths in one order, longest prefix first.
func TestConflictErrorsStable(t *testing.T) {
	m := Match{VIP: netip.MustParseAddr("198.51.100.1"), Protocol: l4.TCP,
		Sources: []netip.Prefix{netip.MustParsePrefix("10.1.0.0/16"), netip.MustParsePrefix("10.1.2.0/24"),
			netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("10.1.2.7/32")}}
	spec := Spec{Marks: []MarkRule{{Match: m, Mark: 1, Comment: "a"}, {Match: m, Mark: 2, Comment: "b"}}}
	const want = "mark rule 0 (a) and mark rule 1 (b) both match tcp 198.51.100.1 from clients in 10.1.2.7/32 with different packet marks (0x1, 0x2)\n" +
		"mark rule 0 (a) and mark rule 1 (b) both match tcp 198.51.100.1 from clients in 10.1.2.0/24 with different packet marks (0x1, 0x2)\n" +
		"mark rule 0 (a) and mark rule 1 (b) both match tcp 198.51.100.1 from clients in 10.1.0.0/16 with different packet marks (0x1, 0x2)\n" +
		"mark rule 0 (a) and mark rule 1 (b) both match tcp 198.51.100.1 from clients in 10.0.0.0/8 with different packet marks (0x1, 0x2)"
	for range 50 {
		_, err := Render(spec)
		if err == nil || err.Error() != want {
			t.Fatalf("got %v\nwant %s", err, want)
		}
	}
}
