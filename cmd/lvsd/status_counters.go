package main

import (
	"io"
	"strconv"

	"github.com/lvsd/lvsd/agent/views"
)

// statusColumns says what the service table shows after the addresses:
// weights and state (ipvsadm -Ln), the kernel's counters (--stats) or its
// rate estimates (--rate).
type statusColumns int

const (
	columnsState statusColumns = iota
	columnsStats
	columnsRate
)

// counterHeads are the columns of --stats and --rate, ipvsadm's names.
var counterHeads = map[statusColumns][]string{
	columnsStats: {"CONNS", "INPKTS", "OUTPKTS", "INBYTES", "OUTBYTES"},
	columnsRate:  {"CPS", "INPPS", "OUTPPS", "INBPS", "OUTBPS"},
}

// writeCounterTable prints services as `ipvsadm -Ln --stats` (or --rate)
// does: a row per IPVS service with the sums over its destinations in the
// kernel, then one per destination. Numbers are exact, as with ipvsadm
// --exact: scripts and eyes both read them.
func writeCounterTable(w io.Writer, services []views.ServiceStatus, cols statusColumns) error {
	rows := make([][]string, 0, 1+len(services)*11)
	rows = append(rows, append([]string{"SERVICE", "PROT LOCAL/REMOTE ADDRESS:PORT"}, counterHeads[cols]...))
	for _, s := range services {
		b := s.Backends
		rows = append(rows, append([]string{s.Name, serviceAddress(s.Key)},
			counterCells(cols, b.Connections, b.PacketsIn, b.PacketsOut, b.BytesIn, b.BytesOut, b.Rates)...))
		for _, d := range s.Destinations {
			cells := []string{"-", "-", "-", "-", "-"} // not in the kernel: no counters
			if d.Weight >= 0 {
				cells = counterCells(cols, d.Connections, d.PacketsIn, d.PacketsOut, d.BytesIn, d.BytesOut, d.Rates)
			}
			rows = append(rows, append([]string{"", "  -> " + d.Address}, cells...))
		}
	}
	return writeTable(w, "", rows)
}

// counterCells are the five numbers cols shows: the counters or the rates.
func counterCells(cols statusColumns, conns, pktsIn, pktsOut, bytesIn, bytesOut uint64, r views.Rates) []string {
	n := []uint64{conns, pktsIn, pktsOut, bytesIn, bytesOut}
	if cols == columnsRate {
		n = []uint64{r.Connections, r.PacketsIn, r.PacketsOut, r.BytesIn, r.BytesOut}
	}
	cells := make([]string, len(n))
	for i, v := range n {
		cells[i] = strconv.FormatUint(v, 10)
	}
	return cells
}
