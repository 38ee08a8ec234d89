package planner

import (
	"net/netip"

	"github.com/lvsd/lvsd/agent/config"
)

// SNATRange is a consecutive range of source addresses.
type SNATRange struct{ From, To netip.Addr }

// peerSNAT maps the FULLNAT services with per-director source addresses
// to them, by ct mark.
func peerSNAT(services []*config.Service, pieces Pieces) map[uint32]map[string]SNATRange {
	out := map[uint32]map[string]SNATRange{}
	for _, s := range services {
		if len(s.SNATByDirector) == 0 {
			continue
		}
		m := make(map[string]SNATRange, len(s.SNATByDirector))
		for home, addrs := range s.SNATByDirector {
			m[home] = SNATRange{From: addrs[0], To: addrs[len(addrs)-1]}
		}
		out[pieces.Get(s.Name).mark] = m
	}
	return out
}
