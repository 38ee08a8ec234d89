package agent

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/lvsd/lvsd/agent/health"
)

// BenchmarkReloadChecked is a SIGHUP at 10,000 services × 10 backends,
// with a tcp check on every backend (a real health.Monitor holding the
// 100,000 targets, not running) and without: with nothing changed, and
// after one backend's weight was edited in one file (as the VM's
// e2e/bench times it), the reload and its pass as the agent's loop runs
// them (ns/op), and the memory settled after them (settle-ns/op: the loop
// does it once the pass has logged "reconciled", and a signal that comes
// meanwhile waits for it). What of it grows with the checks is what the
// checks cost a SIGHUP.
//
//	nice -n 19 go test -run '^$' -bench ReloadChecked -benchtime 10x ./agent
func BenchmarkReloadChecked(b *testing.B) {
	const n = 10000
	for _, checked := range []bool{false, true} {
		for _, edit := range []bool{false, true} {
			b.Run(fmt.Sprintf("checks=%v/edit=%v", checked, edit), func(b *testing.B) {
				benchmarkReload(b, n, checked, edit)
			})
		}
	}
}

func benchmarkReload(b *testing.B, n int, checked, edit bool) {
	e := newEnv(b)
	check := ""
	if checked {
		check = "health: {checks: [{type: tcp}]}\n"
	}
	body := func(i, weight int) string {
		var sb strings.Builder
		fmt.Fprintf(&sb, "service: s%05d\nvip: 10.0.%d.1\nports: [%d]\n%sbackends:\n", i, i/1000, 1000+i%1000, check)
		for j := range 10 {
			fmt.Fprintf(&sb, "  - {address: 10.1.0.%d, weight: %d}\n", j+1, weight)
		}
		return sb.String()
	}
	for i := range n {
		e.service(fmt.Sprintf("s%05d", i), body(i, 1))
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
	var settle time.Duration
	i := 0
	for b.Loop() {
		if edit {
			i++
			e.service(fmt.Sprintf("s%05d", n/2), body(n/2, 1+i%2))
		}
		a.reload("signal", nil)
		a.tick()
		a.reconcile(context.Background())
		start := time.Now()
		a.settleMemory()
		settle += time.Since(start)
	}
	b.ReportMetric(float64(settle.Nanoseconds())/float64(b.N), "settle-ns/op")
	if ops := e.ipvs.Ops(); !edit && len(ops) != 0 {
		b.Fatalf("a reload with nothing changed ran %d IPVS ops", len(ops))
	}
}
