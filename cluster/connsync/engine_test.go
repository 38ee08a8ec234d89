package connsync

import (
	"bytes"
	"errors"
	"net/netip"
	"slices"
	"testing"
	"time"
)

func TestFreshRecordsBatched(t *testing.T) {
	e, tr, _ := testEngine(t, Config{FlushDelay: 5 * time.Millisecond})
	e.fromMaster(datagram(1, conns(2)[0], conns(2)[1]), t0)
	e.fromMaster(datagram(1, tcp6("2001:db8::7", 1).encode()), t0.Add(time.Millisecond))
	if at, ok := e.nextWake(t0); !ok || !at.Equal(t0.Add(5*time.Millisecond)) {
		t.Fatalf("next wake %v %v, want at FlushDelay", at, ok)
	}
	e.tick(t0.Add(4 * time.Millisecond))
	if n := len(tr.messages()); n != 0 {
		t.Fatalf("%d messages before FlushDelay", n)
	}
	e.tick(t0.Add(5 * time.Millisecond))
	msgs := tr.messages()
	if len(msgs) != 1 || msgs[0].to != "" {
		t.Fatalf("messages %v, want one broadcast", msgs)
	}
	m, err := decodeMessage(msgs[0].msg)
	if err != nil || m.flags != 0 || len(m.recs) != 3 || !m.sent.Equal(t0.Add(5*time.Millisecond)) ||
		m.sender != "self" || m.incarnation != uint64(t0.UnixNano()) || m.seq != 1 {
		t.Fatalf("message %+v, err %v", m, err)
	}
	if s := e.st.snapshot(); s.MasterDatagrams != 2 || s.MasterRecords != 3 || s.SentMessages != 1 || s.SentRecords != 3 || s.CacheSize != 3 {
		t.Fatalf("stats %+v", s)
	}
}

// TestFullBatchGoesAtOnce: records that fill a message do not wait.
func TestFullBatchGoesAtOnce(t *testing.T) {
	e, tr, _ := testEngine(t, Config{})
	e.fromMaster(datagram(1, conns(40)...), t0)
	if msgs := tr.messages(); len(msgs) != 1 {
		t.Fatalf("%d messages sent at once, want the one full message", len(msgs))
	}
	e.tick(t0.Add(DefaultFlushDelay))
	msgs := tr.messages()
	first, _ := decodeMessage(msgs[0].msg)
	second, _ := decodeMessage(msgs[1].msg)
	if len(msgs) != 2 || len(first.recs) != 29 || len(second.recs) != 11 || second.seq != first.seq+1 {
		t.Fatalf("%d messages of %d and %d records, numbers %d and %d", len(msgs), len(first.recs), len(second.recs), first.seq, second.seq)
	}
}

func TestMasterDatagramInvalid(t *testing.T) {
	e, tr, _ := testEngine(t, Config{})
	e.fromMaster([]byte{1, 2, 3}, t0)
	e.tick(t0.Add(time.Second))
	if s := e.st.snapshot(); s.DroppedInvalid != 1 || s.MasterDatagrams != 0 || len(tr.messages()) != 0 {
		t.Fatalf("stats %+v", s)
	}
}

func TestDeliver(t *testing.T) {
	e, _, w := testEngine(t, Config{SyncID: 7})
	ok, stale, zero := tcp4("198.51.100.1", 1), tcp4("198.51.100.2", 1), tcp4("198.51.100.3", 1)
	stale.timeout, zero.timeout = 2, 0
	msg := peerB().message(0, t0, ok.encode(), stale.encode(), zero.encode())
	e.deliver(msg, t0.Add(3*time.Second)) // 3 s late: the 2 s record is stale

	want := datagram(7, ok.encode(), zero.encode())
	if len(w.written) != 1 || !bytes.Equal(w.written[0], want) {
		t.Fatalf("wrote %x\nwant %x", w.written, want)
	}
	s := e.st.snapshot()
	if s.ReceivedMessages != 1 || s.ReceivedRecords != 3 || s.DroppedStale != 1 || s.AppliedDatagrams != 1 ||
		s.AppliedRecords != 2 || s.LastLag != 3*time.Second || s.MaxLag != 3*time.Second {
		t.Fatalf("stats %+v", s)
	}
	// Received records are applied, not cached for replay.
	if e.cache.len() != 0 {
		t.Fatalf("cache holds %d received records", e.cache.len())
	}
}

func TestDeliverInvalid(t *testing.T) {
	good := peerB().message(0, t0, tcp4("198.51.100.1", 1).encode())
	for name, msg := range map[string][]byte{
		"truncated": good[:len(good)-1],
		"magic":     append([]byte{'H'}, good[1:]...),
		"version":   append([]byte{'S', 9}, good[2:]...),
		"oversized": append(bytes.Clone(good), make([]byte, 1100)...),
	} {
		t.Run(name, func(t *testing.T) {
			e, _, w := testEngine(t, Config{})
			e.deliver(msg, t0)
			if s := e.st.snapshot(); s.DroppedInvalid != 1 || s.ReceivedMessages != 0 || len(w.written) != 0 {
				t.Fatalf("stats %+v, %d written", s, len(w.written))
			}
		})
	}
}

func TestDeliverWriteError(t *testing.T) {
	e, _, _ := testEngine(t, Config{})
	e.out = failWriter{}
	e.deliver(peerB().message(0, t0, tcp4("198.51.100.1", 1).encode()), t0)
	if s := e.st.snapshot(); s.DroppedWrite != 1 || s.AppliedDatagrams != 0 {
		t.Fatalf("stats %+v", s)
	}
}

type failWriter struct{}

func (failWriter) Write([]byte) error { return errors.New("no buffer space") }
func (failWriter) Close() error       { return nil }

// run drives the engine as Run does, without new input, until it has
// nothing left to do, and returns when that was.
func run(e *engine, now time.Time) time.Time {
	for {
		at, ok := e.nextWake(now)
		if !ok {
			return now
		}
		now = at
		e.tick(now)
	}
}

func TestReplayPaced(t *testing.T) {
	e, tr, _ := testEngine(t, Config{MaxRate: 100})
	for _, r := range conns(250) {
		e.cache.put(r, 0)
	}
	start := t0.Add(100 * time.Second)
	e.startReplay("", start)
	end := run(e, start)

	msgs := tr.messages()
	if len(msgs) != 9 { // 250 records, 29 per message
		t.Fatalf("%d messages", len(msgs))
	}
	// The burst allows one message; then one per 10 ms.
	if d := end.Sub(start); d < 80*time.Millisecond || d > 100*time.Millisecond {
		t.Errorf("replay took %v at 100 messages/s", d)
	}
	for _, m := range msgs {
		d, err := decodeMessage(m.msg)
		if err != nil || d.flags != flagReplay || m.to != "" {
			t.Fatalf("flags %d, to %q, err %v", d.flags, m.to, err)
		}
		for _, r := range d.recs {
			if r.timeout() != 800 { // 900 s at time 0, replayed at 100 s
				t.Fatalf("replayed timeout %d, want 800", r.timeout())
			}
		}
	}
	if s := e.st.snapshot(); s.ReplayedRecords != 250 || s.SentRecords != 250 {
		t.Fatalf("stats %+v", s)
	}
}

func TestReplayToMembers(t *testing.T) {
	e, tr, _ := testEngine(t, Config{})
	for _, r := range conns(58) { // two messages
		e.cache.put(r, 0)
	}
	e.startReplay("b", t0)
	e.startReplay("c", t0)
	e.tokens = 1
	e.pump(t0)             // one message, to b
	e.startReplay("b", t0) // b joined again: its replay starts over
	e.stopReplay("c")      // c left
	run(e, t0)
	var to []string
	for _, m := range tr.messages() {
		to = append(to, m.to)
	}
	// Two messages of records after the restart, then the end marker.
	if want := []string{"b", "b", "b", "b"}; !slices.Equal(to, want) {
		t.Fatalf("sent to %q, want %q", to, want)
	}
	msgs := tr.messages()
	for i, m := range msgs {
		d, err := decodeMessage(m.msg)
		if err != nil {
			t.Fatal(err)
		}
		if end := d.flags&flagReplayEnd != 0; end != (i == len(msgs)-1) || end && len(d.recs) != 0 {
			t.Fatalf("message %d: flags %#x, %d records: want the end marker last, and only there", i, d.flags, len(d.recs))
		}
	}
	if len(e.cache.cursors) != 0 {
		t.Fatalf("%d cursors left", len(e.cache.cursors))
	}
}

// TestPeriodicReplayNotRestarted: a periodic replay still running when the
// next is due is left to finish, or a large cache would never be covered.
func TestPeriodicReplayNotRestarted(t *testing.T) {
	e, tr, _ := testEngine(t, Config{MaxRate: 100})
	for _, r := range conns(87) { // three messages
		e.cache.put(r, 0)
	}
	e.startReplay("", t0)
	e.tick(t0)
	e.startReplay("", t0)
	run(e, t0)
	if n := len(tr.messages()); n != 3 {
		t.Fatalf("%d messages, want 3", n)
	}
}

func TestReplaySkipsExpired(t *testing.T) {
	e, tr, _ := testEngine(t, Config{})
	short := tcp4("198.51.100.1", 1)
	short.timeout = 10
	e.fromMaster(datagram(1, short.encode(), tcp4("198.51.100.2", 1).encode()), t0)
	e.tick(t0.Add(time.Second))
	e.startReplay("", t0.Add(20*time.Second))
	run(e, t0.Add(20*time.Second))
	msgs := tr.messages()
	last, _ := decodeMessage(msgs[len(msgs)-1].msg)
	if len(msgs) != 2 || len(last.recs) != 1 || last.recs[0].key() != rec(tcp4("198.51.100.2", 1).encode()).key() {
		t.Fatalf("%d messages, replay of %d records", len(msgs), len(last.recs))
	}
	if s := e.st.snapshot(); s.Expired != 1 || s.CacheSize != 1 {
		t.Fatalf("stats %+v", s)
	}
}

func TestEngineRelease(t *testing.T) {
	e, _, _ := testEngine(t, Config{})
	e.fromMaster(datagram(1, conns(3)...), t0)
	e.release(netip.MustParseAddr("192.0.2.10"))
	if s := e.st.snapshot(); s.CacheSize != 0 {
		t.Fatalf("stats %+v", s)
	}
}

func TestEvictionCounted(t *testing.T) {
	e, _, _ := testEngine(t, Config{MaxEntries: 2})
	e.fromMaster(datagram(1, conns(3)...), t0)
	if s := e.st.snapshot(); s.Evicted != 1 || s.CacheSize != 2 {
		t.Fatalf("stats %+v", s)
	}
}

// TestEngineIncarnation: the relay's messages carry the incarnation it is
// given, which its director keeps growing across restarts whatever the
// clock does; without one, its start time.
func TestEngineIncarnation(t *testing.T) {
	for _, tt := range []struct {
		given, want uint64
	}{{0, uint64(t0.UnixNano())}, {42, 42}} {
		e, _, _ := testEngine(t, Config{Incarnation: tt.given})
		if e.self.incarnation != tt.want {
			t.Errorf("given %d: incarnation %d, want %d", tt.given, e.self.incarnation, tt.want)
		}
	}
}
