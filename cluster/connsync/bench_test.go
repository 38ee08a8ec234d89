package connsync

import (
	"net/netip"
	"runtime"
	"testing"
	"time"
)

// countingTransport counts what the relay sends and keeps nothing.
type countingTransport struct{ messages, bytes int }

func (c *countingTransport) Name() string                     { return "self" }
func (c *countingTransport) MaySend(string, netip.Addr) bool  { return true }
func (c *countingTransport) Broadcast(msg []byte)             { c.messages++; c.bytes += len(msg) }
func (c *countingTransport) SendTo(member string, msg []byte) { c.Broadcast(msg) }

// masterDatagrams are n datagrams of the master daemon with 29 records of
// distinct IPv4 connections each (as many as a relay message holds).
func masterDatagrams(n int) [][]byte {
	var out [][]byte
	for i := range n {
		var recs [][]byte
		for j := range 29 {
			c := tcp4("10.0.0.1", uint16(j))
			c.caddr = netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)})
			recs = append(recs, c.encode())
		}
		out = append(out, datagram(1, recs...))
	}
	return out
}

// BenchmarkMasterRecords is the relay's work for each record the local
// master daemon sends: parse and validate, cache, batch, hand the message
// to the cluster (not the cluster's encryption and send). It reports the
// share of one core that 10,000 new connections per second cost, a record
// each (docs/ecmp.md, "What connection sync costs").
func BenchmarkMasterRecords(b *testing.B) {
	tr := &countingTransport{}
	cfg := Config{Transport: tr}
	if err := cfg.setDefaults(); err != nil {
		b.Fatal(err)
	}
	e := newEngine(cfg, &counters{}, cfg.Log, &fakeWriter{}, t0)
	dgs := masterDatagrams(4096) // 118,784 connections, then updates of the same
	b.ReportAllocs()
	b.ResetTimer()
	now := t0
	for i := range b.N {
		now = now.Add(time.Millisecond)
		e.fromMaster(dgs[i%len(dgs)], now)
	}
	b.StopTimer()
	perRecord := float64(b.Elapsed().Nanoseconds()) / float64(b.N*29)
	b.ReportMetric(perRecord, "ns/record")
	b.ReportMetric(perRecord*10000/1e9*100, "%core@10k/s")
}

// BenchmarkCacheBytes is the memory the relay's cache takes per cached
// connection (heap after a GC, divided by the entries).
func BenchmarkCacheBytes(b *testing.B) {
	const n = 100_000
	recs := make([]rec, 0, n)
	for _, d := range masterDatagrams(n / 29) {
		_, rs, err := parseDatagram(d)
		if err != nil {
			b.Fatal(err)
		}
		recs = append(recs, rs...)
	}
	for range b.N {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		c := newCache(1<<20, time.Hour)
		for _, r := range recs {
			c.put(r, 0)
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/float64(c.len()), "B/connection")
		runtime.KeepAlive(c)
	}
}
