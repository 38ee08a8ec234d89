package rules_test

import (
	"net/netip"
	"testing"

	"github.com/lvsd/lvsd/ipvs/l4"
	"github.com/lvsd/lvsd/nat/internal/golden"
	"github.com/lvsd/lvsd/nat/rules"
)

// The golden cases (testdata/*.golden), which nat's tests also apply to a
// network namespace.
var (
	goldenCases = golden.Cases
	steering    = golden.Steering
)

func addr(s string) netip.Addr   { return netip.MustParseAddr(s) }
func ap(s string) netip.AddrPort { return netip.MustParseAddrPort(s) }
func port(p uint16) l4.PortRange { return l4.PortRange{From: p, To: p} }

func addrs(ss ...string) []netip.Addr {
	as := make([]netip.Addr, len(ss))
	for i, s := range ss {
		as[i] = addr(s)
	}
	return as
}

func prefixes(ss ...string) []netip.Prefix {
	ps := make([]netip.Prefix, len(ss))
	for i, s := range ss {
		ps[i] = netip.MustParsePrefix(s)
	}
	return ps
}

func mustRender(t *testing.T, s rules.Spec) rules.Ruleset {
	t.Helper()
	rs, err := rules.Render(s)
	if err != nil {
		t.Fatal(err)
	}
	return rs
}
