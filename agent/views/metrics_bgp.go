package views

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/lvsd/lvsd/cluster/bgp"
)

// Metrics of the BGP speaker and the director's drain, exported only with a
// bgp block (docs/operations.md).
var (
	descBGPUp    = desc("bgp_session_up", "1 while the BGP session with the router is established.", "peer")
	descBGPFlaps = desc("bgp_session_flaps_total", "Times the BGP session with the router left the established state.", "peer")
	descBFDUp    = desc("bfd_session_up", "1 while the BFD session with the router is up (peers with bfd only).", "peer")
	descBFDDowns = desc("bfd_session_downs_total", "Times the BFD session with the router went from up to down, "+
		"short losses that cost no BGP session included (peers with bfd only).", "peer")
	descBGPRoutes = desc("bgp_routes_announced", "VIP routes this director announces to the routers.")
	descBGPRecv   = desc("bgp_prefixes_received", "Prefixes the router sent this director (none is imported).", "peer")
	descBGPMaxPfx = desc("bgp_max_prefixes_exceeded_total", "BGP sessions in which the router sent more prefixes than "+
		"max_prefixes, and sessions closed at the hard limit.", "peer")
	descBGPMD5 = desc("bgp_tcp_md5_failures_total", "TCP segments the kernel dropped for a wrong or missing TCP-MD5 "+
		"signature since lvsd started (a password mismatch with a router).")
	descDrained = desc("director_drained", "1 while this director is drained (lvsd drain): its routes withdrawn or depreferred.")
)

var bgpDescs = []*prometheus.Desc{descBGPUp, descBGPFlaps, descBFDUp, descBFDDowns, descBGPRoutes, descBGPRecv, descBGPMaxPfx, descBGPMD5, descDrained}

func collectBGP(s *bgp.Status, drained bool, gauge func(*prometheus.Desc, float64, ...string), counter func(*prometheus.Desc, uint64, ...string)) {
	for _, p := range s.Peers {
		peer := p.Address.String()
		gauge(descBGPUp, b2f(p.State == bgp.StateEstablished), peer)
		counter(descBGPFlaps, uint64(p.Flaps), peer)
		gauge(descBGPRecv, float64(p.Received), peer)
		counter(descBGPMaxPfx, uint64(p.PrefixBreaches), peer)
		if p.BFD != "" {
			gauge(descBFDUp, b2f(p.BFD == "up"), peer)
			counter(descBFDDowns, uint64(p.BFDDowns), peer)
		}
	}
	gauge(descBGPRoutes, float64(len(s.Routes)))
	counter(descBGPMD5, s.MD5Failures)
	gauge(descDrained, b2f(drained))
}
