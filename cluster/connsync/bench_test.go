package connsync

import (
	"bytes"
	"math/rand/v2"
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
		out = append(out, masterDatagram(i))
	}
	return out
}

// masterDatagram is the i-th of masterDatagrams.
func masterDatagram(i int) []byte {
	var recs [][]byte
	for j := range 29 {
		c := tcp4("10.0.0.1", uint16(j))
		c.caddr = netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)})
		recs = append(recs, c.encode())
	}
	return datagram(1, recs...)
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
// connection (heap after a GC, divided by the entries): of 100,000 IPv4 or
// IPv6 connections, and of a full cache (DefaultMaxEntries IPv4
// connections), whose total it reports too (docs/performance.md).
func BenchmarkCacheBytes(b *testing.B) {
	v4 := func(i int) netip.Addr { return netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)}) }
	v6 := func(i int) netip.Addr {
		return netip.AddrFrom16([16]byte{0x20, 0x01, 0x0d, 0xb8, 15: byte(i), 14: byte(i >> 8), 13: byte(i >> 16)})
	}
	for _, tt := range []struct {
		name   string
		n      int
		client func(i int) netip.Addr
		conn   func(client string, cport uint16) testConn
	}{
		{"ipv4", 100_000, v4, tcp4},
		{"ipv6", 100_000, v6, tcp6},
		{"ipv4_full", DefaultMaxEntries, v4, tcp4},
	} {
		b.Run(tt.name, func(b *testing.B) {
			recs := make([]rec, 0, tt.n)
			for i := range tt.n {
				recs = append(recs, tt.conn(tt.client(i/29).String(), uint16(i%29)).encode())
			}
			for range b.N {
				var before, after runtime.MemStats
				runtime.GC()
				runtime.ReadMemStats(&before)
				c := newCache(DefaultMaxEntries, time.Hour)
				for _, r := range recs {
					c.put(r, 0)
				}
				runtime.GC()
				runtime.ReadMemStats(&after)
				if c.len() != tt.n {
					b.Fatalf("%d entries, want %d", c.len(), tt.n)
				}
				heap := float64(after.HeapAlloc - before.HeapAlloc)
				b.ReportMetric(heap/float64(c.len()), "B/connection")
				b.ReportMetric(heap/1e6, "MB")
				runtime.KeepAlive(c)
			}
			runtime.KeepAlive(recs)
		})
	}
}

// BenchmarkCachePut is the cache's part of a record's cost, in a cache of
// a million IPv4 connections: a connection it does not hold (the oldest is
// evicted), and an update of one it holds, in an order that defeats the
// CPU's caches.
func BenchmarkCachePut(b *testing.B) {
	const n = 1 << 20
	recs := make([]rec, n)
	for i := range n {
		c := tcp4("10.0.0.1", uint16(i))
		c.caddr = netip.AddrFrom4([4]byte{10, byte(i >> 24), byte(i >> 16), byte(i >> 8)})
		recs[i] = c.encode()
	}
	rand.New(rand.NewPCG(1, 2)).Shuffle(n, func(i, j int) { recs[i], recs[j] = recs[j], recs[i] })
	fill := func() *cache {
		c := newCache(n, time.Hour)
		for _, r := range recs {
			c.put(r, 0)
		}
		return c
	}
	b.Run("new", func(b *testing.B) {
		c := fill()
		other := make([]rec, n)
		for i, r := range recs {
			other[i] = bytes.Clone(r)
			other[i][offCport] ^= 0x80 // another client port
		}
		b.ResetTimer()
		for i := range b.N {
			// Each round evicts the other round's connections.
			c.put([2][]rec{other, recs}[(i/n)%2][i%n], 0)
		}
	})
	b.Run("update", func(b *testing.B) {
		c := fill()
		b.ResetTimer()
		for i := range b.N {
			c.put(recs[(i*7919)%n], 0)
		}
	})
}

// BenchmarkResyncBytes states what keeping the peers' copies complete
// costs per peer and ResyncInterval (10 s), in relay-message bytes (each
// message is one UDP datagram; memberlist, AES-GCM, IP and UDP add about 60
// bytes plus the cluster label per datagram, docs/ecmp.md):
//
//   - full_B: the whole cache of 1,000,000 IPv4 connections replayed, what
//     every interval cost before anti-entropy (now only the joining member's
//     catch-up, a fallback, and the FullResyncInterval safety net);
//   - summary_B: one summary, all an interval costs without loss;
//   - loss_B: with 10,000 new connections per second (100,000 records in
//     full messages per interval) and every 1,000th fresh message lost
//     (0.1 %): the summary, the receiver's requests and the re-sent
//     records.
//
// Run it once: go test -run '^$' -bench ResyncBytes -benchtime 1x.
func BenchmarkResyncBytes(b *testing.B) {
	for range b.N {
		full, fullMsgs := fullReplayBytes(b, 1_000_000)
		summary, loss, lost := lossyIntervalBytes(b, 10_000, 1000)
		b.ReportMetric(float64(full), "full_B")
		b.ReportMetric(float64(fullMsgs), "full_msgs")
		b.ReportMetric(float64(summary), "summary_B")
		b.ReportMetric(float64(loss), "loss_B")
		b.ReportMetric(float64(lost), "lost_msgs")
	}
}

// fullReplayBytes replays a cache of n connections to one member.
func fullReplayBytes(b *testing.B, n int) (bytes, messages int) {
	tr := &countingTransport{}
	cfg := Config{Transport: tr}
	if err := cfg.setDefaults(); err != nil {
		b.Fatal(err)
	}
	e := newEngine(cfg, &counters{}, cfg.Log, &fakeWriter{}, t0)
	for i := 0; e.cache.len() < n; i++ {
		_, recs, err := parseDatagram(masterDatagram(i))
		if err != nil {
			b.Fatal(err)
		}
		for _, r := range recs[:min(len(recs), n-e.cache.len())] {
			e.cache.put(r, 0)
		}
	}
	e.startReplay("b", t0)
	run(e, t0)
	return tr.bytes, tr.messages
}

// lossyIntervalBytes sends perSecond new connections a second for one
// ResyncInterval from a to b, losing every loseEvery-th fresh message, and
// returns the bytes of one summary and of what making up for the loss
// cost both ways (the summary included).
func lossyIntervalBytes(b *testing.B, perSecond, loseEvery int) (summary, total, lost int) {
	l := newAELink(b)
	l.lose = func(m message) bool { return m.flags == 0 && m.stream%uint64(loseEvery) == 0 }
	start, startB := len(l.ta.messages()), len(l.tb.messages())
	seconds := int(DefaultResyncInterval / time.Second)
	perSecondMsgs := perSecond / 29
	for i := range seconds * perSecondMsgs {
		l.a.fromMaster(masterDatagram(i), l.now)
		l.a.flush(l.now)
		if (i+1)%perSecondMsgs == 0 {
			l.deliver()
			l.now = l.now.Add(time.Second)
			l.b.requestMissing(l.now)
		}
	}
	l.a.summarize(l.now)
	l.deliver()
	l.check()
	for _, s := range l.ta.messages()[start:] {
		m, err := decodeMessage(s.msg)
		if err != nil {
			b.Fatal(err)
		}
		switch {
		case m.flags == 0:
			if l.lose(m) {
				lost++
			}
		case m.flags == flagSummary:
			summary = len(s.msg)
			total += len(s.msg)
		default:
			total += len(s.msg)
		}
	}
	for _, s := range l.tb.messages()[startB:] {
		total += len(s.msg)
	}
	if got := l.b.st.snapshot().AppliedRecords; got != uint64(seconds*perSecondMsgs*29) {
		b.Fatalf("b applied %d records, want %d", got, seconds*perSecondMsgs*29)
	}
	return summary, total, lost
}

// BenchmarkOriginsBytes is the memory the first directors of applied NAT
// connections take (origins.go, with Config.Applied: FULLNAT under ECMP),
// per connection: of 100,000 IPv4 or IPv6 connections, and of a full table
// (DefaultMaxEntries IPv4 connections), whose total it reports too
// (docs/performance.md).
func BenchmarkOriginsBytes(b *testing.B) {
	for _, tt := range []struct {
		name string
		n    int
		conn func(i int) testConn
	}{
		{"ipv4", 100_000, masqConn4},
		{"ipv6", 100_000, masqConn6},
		{"ipv4_full", DefaultMaxEntries, masqConn4},
	} {
		b.Run(tt.name, func(b *testing.B) {
			recs := make([]rec, 0, tt.n)
			for i := range tt.n {
				recs = append(recs, tt.conn(i).encode())
			}
			names := []string{"director-a", "director-b", "director-c"}
			for range b.N {
				var before, after runtime.MemStats
				runtime.GC()
				runtime.ReadMemStats(&before)
				o := newOrigins(DefaultMaxEntries)
				for i, r := range recs {
					o.note(r, names[i%len(names)], 0)
				}
				runtime.GC()
				runtime.ReadMemStats(&after)
				if o.len() != tt.n {
					b.Fatalf("%d entries, want %d", o.len(), tt.n)
				}
				heap := float64(after.HeapAlloc - before.HeapAlloc)
				b.ReportMetric(heap/float64(o.len()), "B/connection")
				b.ReportMetric(heap/1e6, "MB")
				runtime.KeepAlive(o)
			}
			runtime.KeepAlive(recs)
		})
	}
}

// masqConn4 is the i-th of distinct IPv4 NAT connections, 29 per client.
func masqConn4(i int) testConn {
	return masq4(netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)}).String(), uint16(i%29))
}

// masqConn6 is the i-th of distinct IPv6 NAT connections, 29 per client.
func masqConn6(i int) testConn {
	c := tcp6(netip.AddrFrom16([16]byte{0x20, 0x01, 0x0d, 0xb8, 15: byte(i), 14: byte(i >> 8), 13: byte(i >> 16)}).String(), uint16(i%29))
	c.flags = 0
	return c
}

// BenchmarkOrigins is the origins' part of a record's cost with
// DefaultMaxEntries IPv4 connections noted, in an order that defeats the
// CPU's caches: noting an applied connection's origin again (the receiving
// side), looking up that of a synced one the master sends (the sending
// side), and noting one more while every origin is live (none is noted,
// but the table is swept for room).
func BenchmarkOrigins(b *testing.B) {
	const n = DefaultMaxEntries
	recs := make([]rec, n)
	for i := range n {
		recs[i] = masqConn4(i).encode()
	}
	rand.New(rand.NewPCG(1, 2)).Shuffle(n, func(i, j int) { recs[i], recs[j] = recs[j], recs[i] })
	o := newOrigins(n)
	for _, r := range recs {
		o.note(r, "director-b", 0)
	}
	b.Run("note", func(b *testing.B) {
		for i := range b.N {
			o.note(recs[(i*7919)%n], "director-b", time.Second)
		}
	})
	b.Run("of", func(b *testing.B) {
		for i := range b.N {
			if o.of(recs[(i*7919)%n], time.Second) == "" {
				b.Fatal("origin unknown")
			}
		}
	})
	b.Run("full", func(b *testing.B) {
		more := masqConn4(n).encode()
		for i := range b.N {
			o.note(more, "director-b", time.Second+time.Duration(i)*time.Microsecond)
		}
		if o.len() != n || o.of(more, time.Second) != "" {
			b.Fatal("an origin past the bound was noted")
		}
	})
}

// BenchmarkPeerRecords is the relay's work for each record a peer's
// message brings: decode, prove (sender, sequence, age), authorise each
// record (its service and real server configured here, its sender holding
// the VIP) and write them to the backup daemon (not memberlist's receive
// and decryption). With BenchmarkMasterRecords it gives a director's relay
// CPU when the cluster as a whole opens a given number of connections per
// second: under ECMP every director sends its own records and applies
// everyone else's.
func BenchmarkPeerRecords(b *testing.B) {
	e, _, _ := testEngine(b, Config{})
	e.backupStarted(t0)
	from := peerB()
	// 4,096 messages of 29 records: 118,784 connections, then updates of
	// the same in messages with new sequence numbers (a message seen
	// before is refused), made outside the timer.
	message := func(k int, sent time.Time) []byte {
		var recs [][]byte
		for j := range 29 {
			c := tcp4("10.0.0.1", uint16(j))
			c.caddr = netip.AddrFrom4([4]byte{10, byte(k >> 16), byte(k >> 8), byte(k)})
			recs = append(recs, c.encode())
		}
		return from.message(0, sent, recs...)
	}
	msgs := make([][]byte, 4096)
	now := t0
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		if i%len(msgs) == 0 {
			b.StopTimer()
			for k := range msgs {
				msgs[k] = message(k, now)
			}
			b.StartTimer()
		}
		now = now.Add(time.Millisecond)
		e.deliver(msgs[i%len(msgs)], now)
	}
	b.StopTimer()
	if got := e.st.appliedRecords.Load(); got != uint64(b.N*29) {
		b.Fatalf("%d records applied of %d", got, b.N*29)
	}
	perRecord := float64(b.Elapsed().Nanoseconds()) / float64(b.N*29)
	b.ReportMetric(perRecord, "ns/record")
	b.ReportMetric(perRecord*10000/1e9*100, "%core@10k/s")
}
