package health

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"runtime"
	"testing"
	"time"
)

// scaleTargets are n targets as a director of n/10 services of 10 checked
// backends has them: a tcp check every minute, one slice of checks per
// service (as the agent hands them over).
func scaleTargets(n int) []Target {
	ts := make([]Target, n)
	var checks []Check
	for i := range ts {
		if i%10 == 0 {
			checks = []Check{{Type: "tcp", Interval: time.Minute, Timeout: time.Second}}
		}
		ts[i] = Target{
			Key: fmt.Sprintf("svc%05d/10.1.0.%d:80", i/10, i%10+1), Group: fmt.Sprintf("svc%05d", i/10),
			Addr: netip.AddrFrom4([4]byte{10, 1, byte(i / 10 >> 8), byte(i % 10)}), Port: 80, Rise: 2, Fall: 3,
			Checks: checks,
		}
	}
	return ts
}

// BenchmarkMonitorStart is what a director's start costs the checker: the
// Set of every target into a running Monitor (set-ms), the memory it then
// holds per target after 2 s of rounds (heap-B/target: the heap's spans in
// use; live-B/target: the bytes of live objects, the settled heap; and the
// goroutine stacks), its goroutines, the rounds run in those 2 s (asked:
// n/60 a second), and a reload that hands every target over again
// unchanged (reset-ms). fake: checkers from a factory that pass at once, so
// only the Monitor is measured; tcp: the built-in tcp check, its dials
// answered at once without a socket. To mimic a slow host:
// GOMAXPROCS=1 nice -n 19 go test -run '^$' -bench MonitorStart ./agent/health
func BenchmarkMonitorStart(b *testing.B) {
	fake := WithFactory(func(*Target, *Check) Checker {
		return CheckerFunc(func(context.Context) Result { return pass })
	})
	for _, n := range []int{10_000, 100_000} {
		for _, kind := range []struct {
			name string
			opt  Option
		}{{"fake", fake}, {"tcp", WithDialer(okDialer{})}} {
			b.Run(fmt.Sprintf("%s/%d", kind.name, n), func(b *testing.B) {
				for b.Loop() {
					measureStart(b, n, kind.opt)
				}
			})
		}
	}
}

func measureStart(b *testing.B, n int, opt Option) {
	ts := scaleTargets(n)
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	goroutines := runtime.NumGoroutine()
	m := NewMonitor(nil, opt)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- m.Run(ctx) }()
	start := time.Now()
	m.Set(ts)
	set := time.Since(start)
	time.Sleep(2 * time.Second)
	m.Changes() // as the agent does every check tick: what Set marked is handed over
	runtime.GC()
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(ts) // the caller's targets are not the Monitor's memory
	var rounds uint64
	for _, st := range m.Snapshot() {
		rounds += st.Rounds
	}
	again := scaleTargets(n)
	start = time.Now()
	m.Set(again)
	reset := time.Since(start)
	b.ReportMetric(float64(set.Microseconds())/1000, "set-ms")
	b.ReportMetric(float64(reset.Microseconds())/1000, "reset-ms")
	b.ReportMetric(float64(after.HeapInuse-before.HeapInuse)/float64(n), "heap-B/target")
	b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/float64(n), "live-B/target")
	b.ReportMetric(float64(int64(after.StackInuse)-int64(before.StackInuse))/float64(n), "stack-B/target")
	b.ReportMetric(float64(runtime.NumGoroutine()-goroutines), "goroutines")
	b.ReportMetric(float64(rounds)/2, "rounds/s")
	cancel()
	<-done
}

// okDialer connects at once, without a socket.
type okDialer struct{}

func (okDialer) DialContext(context.Context, string, string) (net.Conn, error) { return nopConn{}, nil }

// nopConn is a connection that only closes.
type nopConn struct{ net.Conn }

func (nopConn) Close() error { return nil }
