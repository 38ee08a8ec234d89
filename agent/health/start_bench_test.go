package health

import (
	"context"
	"fmt"
	"net/netip"
	"runtime"
	"testing"
	"time"
)

// scaleTargets are n targets as a director of n/10 services of 10 checked
// backends has them: a tcp check every minute.
func scaleTargets(n int) []Target {
	ts := make([]Target, n)
	for i := range ts {
		ts[i] = Target{
			Key: fmt.Sprintf("svc%05d/10.1.0.%d:80", i/10, i%10+1), Group: fmt.Sprintf("svc%05d", i/10),
			Addr: netip.AddrFrom4([4]byte{10, 1, byte(i / 10 >> 8), byte(i % 10)}), Port: 80, Rise: 2, Fall: 3,
			Checks: []Check{{Type: "tcp", Interval: time.Minute, Timeout: time.Second}},
		}
	}
	return ts
}

// BenchmarkMonitorStart is what a director's start costs the checker: the
// Set of every target into a running Monitor (set-ms), the memory it then
// holds per target (heap and goroutine stacks, after 2 s of rounds), its
// goroutines, and the rounds run in those 2 s (asked: n/60 a second).
// Checks pass at once (a fake), so only the checker is measured. To mimic
// a slow host: GOMAXPROCS=1 nice -n 19 go test -run '^$' -bench MonitorStart ./agent/health
func BenchmarkMonitorStart(b *testing.B) {
	for _, n := range []int{10_000, 100_000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			for b.Loop() {
				ts := scaleTargets(n)
				runtime.GC()
				var before, after runtime.MemStats
				runtime.ReadMemStats(&before)
				goroutines := runtime.NumGoroutine()
				m := NewMonitor(nil, WithFactory(func(*Target, *Check) Checker {
					return CheckerFunc(func(context.Context) Result { return pass })
				}))
				ctx, cancel := context.WithCancel(context.Background())
				done := make(chan error)
				go func() { done <- m.Run(ctx) }()
				start := time.Now()
				m.Set(ts)
				set := time.Since(start)
				time.Sleep(2 * time.Second)
				runtime.GC()
				runtime.ReadMemStats(&after)
				var rounds uint64
				for _, st := range m.Snapshot() {
					rounds += st.Rounds
				}
				b.ReportMetric(float64(set.Microseconds())/1000, "set-ms")
				b.ReportMetric(float64(after.HeapInuse-before.HeapInuse)/float64(n), "heap-B/target")
				b.ReportMetric(float64(int64(after.StackInuse)-int64(before.StackInuse))/float64(n), "stack-B/target")
				b.ReportMetric(float64(runtime.NumGoroutine()-goroutines), "goroutines")
				b.ReportMetric(float64(rounds)/2, "rounds/s")
				cancel()
				<-done
			}
		})
	}
}
