package rules_test

import (
	"net/netip"
	"testing"

	"github.com/lvsd/lvsd/nat/internal/golden"
	"github.com/lvsd/lvsd/nat/rules"
)

// The golden cases (testdata/*.golden), which nat's tests also apply to a
// network namespace.
var (
	goldenCases = golden.Cases
	steering    = golden.Steering
)

var (
	addr     = golden.Addr
	addrs    = golden.Addrs
	prefixes = golden.Prefixes
	port     = golden.Port
)

func ap(s string) netip.AddrPort { return netip.MustParseAddrPort(s) }

func mustRender(t *testing.T, s rules.Spec) rules.Ruleset {
	t.Helper()
	rs, err := rules.Render(s)
	if err != nil {
		t.Fatal(err)
	}
	return rs
}
