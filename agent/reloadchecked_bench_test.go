package agent

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/lvsd/lvsd/agent/health"
)

// BenchmarkReloadChecked is a SIGHUP with nothing changed at 10,000
// services × 10 backends, with a tcp check on every backend (a real
// health.Monitor holding the 100,000 targets, not running) and without:
// the reload, its pass and the memory settled after it, as the agent's
// loop runs them. Nothing of it should grow with the checks: a reload
// that changes no service hands the checker nothing.
//
//	nice -n 19 go test -run '^$' -bench ReloadChecked -benchtime 10x ./agent
func BenchmarkReloadChecked(b *testing.B) {
	const n = 10000
	for _, checked := range []bool{false, true} {
		b.Run(fmt.Sprintf("checks=%v", checked), func(b *testing.B) {
			e := newEnv(b)
			check := ""
			if checked {
				check = "health: {checks: [{type: tcp}]}\n"
			}
			for i := range n {
				var sb strings.Builder
				fmt.Fprintf(&sb, "service: s%05d\nvip: 10.0.%d.1\nports: [%d]\n%sbackends:\n", i, i/1000, 1000+i%1000, check)
				for j := range 10 {
					fmt.Fprintf(&sb, "  - {address: 10.1.0.%d}\n", j+1)
				}
				e.service(fmt.Sprintf("s%05d", i), sb.String())
			}
			var opts Options
			if checked {
				opts.Health = health.NewMonitor(nil)
			}
			a := e.agentWith(opts)
			a.reconcile(context.Background())
			a.settleMemory()
			e.ipvs.Ops()
			b.ReportAllocs()
			for b.Loop() {
				a.reload("signal", nil)
				a.tick()
				a.reconcile(context.Background())
				a.settleMemory()
			}
			if ops := e.ipvs.Ops(); len(ops) != 0 {
				b.Fatalf("a reload with nothing changed ran %d IPVS ops", len(ops))
			}
		})
	}
}
