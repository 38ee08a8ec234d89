package views

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/lvsd/lvsd/agent"
)

// The director's TOA program (client_address: toa, docs/toa.md); absent
// without one. They count since the program's maps were created: four
// per-CPU counters, read at the scrape whatever the traffic.
var (
	descTOAAdded = desc("toa_options_added_total", "SYNs to a VIP:port with client_address toa that the "+
		"director's TOA program gave the client's address and port.")
	descTOANoRoom = desc("toa_no_room_total", "SYNs whose TCP options left no room for the client's address: "+
		"passed without it, so the real server sees the director's address.")
	descTOAStripped = desc("toa_forged_stripped_total", "Packets from clients that carried a TOA option of their "+
		"own (a forged address), overwritten before they reach the real servers.")
	descTOAUnsupported = desc("toa_unsupported_total", "SYNs passed without the client's address: IPv4 options, "+
		"data in the SYN, a helper that failed.")
	descTOAInterfaces = desc("toa_interfaces", "Interfaces that carry the director's TOA program.")
	toaDescs          = []*prometheus.Desc{descTOAAdded, descTOANoRoom, descTOAStripped, descTOAUnsupported, descTOAInterfaces}
)

func collectTOA(t *agent.TOAStatus, gauge func(*prometheus.Desc, float64, ...string), counter func(*prometheus.Desc, uint64, ...string)) {
	counter(descTOAAdded, t.Added)
	counter(descTOANoRoom, t.NoRoom)
	counter(descTOAStripped, t.Stripped)
	counter(descTOAUnsupported, t.Unsupported)
	gauge(descTOAInterfaces, float64(len(t.Interfaces)))
}
