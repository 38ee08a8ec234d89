package nat

import (
	"net/netip"

	"github.com/lvsd/lvsd/ipvs/l4"
	"github.com/lvsd/lvsd/nat/internal/golden"
)

// The rulesets of nat/rules's golden files, which the netns tests apply
// and compare `nft list` with.
var (
	goldenCases = golden.Cases
	steering    = golden.Steering
)

func addr(s string) netip.Addr { return netip.MustParseAddr(s) }

func addrs(ss ...string) []netip.Addr {
	as := make([]netip.Addr, len(ss))
	for i, s := range ss {
		as[i] = addr(s)
	}
	return as
}

func port(p uint16) l4.PortRange { return l4.PortRange{From: p, To: p} }
