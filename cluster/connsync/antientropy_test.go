package connsync

import (
	"bytes"
	"net/netip"
	"slices"
	"testing"
	"time"
)

// aeLink is director a's engine sending to director b's, over fake
// transports the test delivers by hand, losing what it is told to.
type aeLink struct {
	t        testing.TB
	a, b     *engine
	ta, tb   *fakeTransport
	wb       *fakeWriter
	now      time.Time
	nextA    int // a's messages up to here were delivered or lost
	nextB    int
	lose     func(m message) bool // a's messages to b that are lost
	conns    int                  // connections a's master reported
	toBBytes int                  // bytes of a's messages b was sent
}

func newAELink(t testing.TB) *aeLink {
	t.Helper()
	l := &aeLink{t: t, now: t0, lose: func(message) bool { return false }}
	l.a, l.ta, _ = testEngine(t, Config{Transport: &fakeTransport{name: "a"}})
	l.b, l.tb, l.wb = testEngine(t, Config{Transport: &fakeTransport{name: "b"}})
	l.a.members["b"], l.b.members["a"] = true, true
	// b joins: a's replay of its empty cache tells b where a's stream is.
	l.a.startReplay("b", l.now)
	l.deliver()
	return l
}

// send has a's master report conns and a broadcast them as one message.
func (l *aeLink) send(conns ...testConn) {
	var recs [][]byte
	for _, c := range conns {
		recs = append(recs, c.encode())
	}
	l.a.fromMaster(datagram(1, recs...), l.now)
	l.a.flush(l.now)
	l.conns += len(conns)
}

// newConns sends n new connections, one message each.
func (l *aeLink) newConns(n int) {
	for range n {
		l.send(tcp4("198.51.100.1", uint16(1000+l.conns)))
	}
}

// deliver hands each side what the other sent since the last call, a's
// pumped replays included, until neither has more to say.
func (l *aeLink) deliver() {
	for {
		l.now = run(l.a, l.now)
		am, bm := l.ta.messages()[l.nextA:], l.tb.messages()[l.nextB:]
		l.nextA += len(am)
		l.nextB += len(bm)
		if len(am)+len(bm) == 0 {
			return
		}
		for _, s := range am {
			if s.to != "" && s.to != "b" {
				continue
			}
			m, err := decodeMessage(s.msg)
			if err != nil {
				l.t.Fatal(err)
			}
			l.toBBytes += len(s.msg)
			if !l.lose(m) {
				l.b.deliver(s.msg, l.now)
			}
		}
		for _, s := range bm {
			if s.to == "a" {
				l.a.deliver(s.msg, l.now)
			}
		}
	}
}

// check has b look for gaps twice, gapCheckInterval apart: a gap it knows
// of is asked for by the second.
func (l *aeLink) check() {
	for range 2 {
		l.now = l.now.Add(gapCheckInterval)
		l.b.requestMissing(l.now)
		l.deliver()
	}
}

// sentToB returns a's messages to b from index from on, decoded.
func (l *aeLink) sentToB(from int) []message {
	var out []message
	for _, s := range l.ta.messages()[from:] {
		if s.to == "b" || s.to == "" {
			m, err := decodeMessage(s.msg)
			if err != nil {
				l.t.Fatal(err)
			}
			m.recs = append([]rec(nil), m.recs...)
			out = append(out, m)
			if s.to == "" {
				out[len(out)-1].sender = "" // mark broadcasts
			}
		}
	}
	return out
}

func loseStream(numbers ...uint64) func(message) bool {
	return func(m message) bool {
		for _, n := range numbers {
			if m.flags == 0 && m.stream == n {
				return true
			}
		}
		return false
	}
}

// replayedConns returns the client ports of the records in a's replayed
// messages, and whether all went to b alone.
func (l *aeLink) replayedConns() (ports []uint16, toBOnly bool) {
	toBOnly = true
	for _, m := range l.sentToB(0) {
		if m.flags&flagReplay == 0 {
			continue
		}
		toBOnly = toBOnly && m.sender != ""
		for _, r := range m.recs {
			ports = append(ports, r.key().cport)
		}
	}
	return ports, toBOnly
}

// TestAntiEntropyResends: what b lost is found and a sends b the current
// records of exactly those messages' connections, or its whole cache when
// b lost more than a can tell.
func TestAntiEntropyResends(t *testing.T) {
	tests := []struct {
		name      string
		messages  int
		lose      []uint64
		summarize bool
		want      []uint16 // client ports re-sent; nil: the whole cache
	}{
		{"lost in the middle", 5, []uint64{3}, false, []uint16{1002}},
		{"two lost apart", 8, []uint64{2, 6}, false, []uint16{1001, 1005}},
		{"lost last, found by the summary", 3, []uint64{3}, true, []uint16{1002}},
		{"lost a whole window", ringSize + 10, []uint64{5}, false, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := newAELink(t)
			l.lose = loseStream(tt.lose...)
			l.newConns(tt.messages)
			l.deliver()
			if tt.summarize {
				l.a.summarize(l.now)
				l.deliver()
			}
			l.check()
			from := len(l.ta.messages())
			l.lose = func(message) bool { return false }
			l.check()
			if got := len(l.ta.messages()); got != from {
				t.Fatalf("a sent %d more messages after the loss was made up", got-from)
			}
			ports, toB := l.replayedConns()
			sa, sb := l.a.st.snapshot(), l.b.st.snapshot()
			if !toB {
				t.Fatal("a re-sent to others than b")
			}
			if tt.want == nil {
				if len(ports) != tt.messages || sa.FallbackReplays != 1 || sa.ResentRecords != 0 {
					t.Fatalf("%d records replayed, stats %+v: want the whole cache of %d once", len(ports), sa, tt.messages)
				}
				return
			}
			if !slices.Equal(ports, tt.want) {
				t.Fatalf("re-sent connections %v, want %v", ports, tt.want)
			}
			if sa.ResentRecords != uint64(len(tt.want)) || sa.FallbackReplays != 0 || sb.MissingMessages != uint64(len(tt.lose)) ||
				sb.RequestsSent != 1 || sa.RequestsReceived != 1 {
				t.Fatalf("stats a %+v\nb %+v", sa, sb)
			}
			if sb.AppliedRecords != uint64(tt.messages) {
				t.Fatalf("b applied %d records, want %d", sb.AppliedRecords, tt.messages)
			}
		})
	}
}

// TestAntiEntropyQuietWithoutLoss: with nothing lost, a sends b nothing but
// a summary per interval, and b asks for nothing.
func TestAntiEntropyQuietWithoutLoss(t *testing.T) {
	l := newAELink(t)
	l.newConns(10)
	l.deliver()
	fresh := l.toBBytes
	const intervals = 5
	for range intervals {
		l.now = l.now.Add(DefaultResyncInterval)
		l.a.summarize(l.now)
		l.deliver()
		l.check()
	}
	sa, sb := l.a.st.snapshot(), l.b.st.snapshot()
	summary := headerLen("a") + 2 // the v4 trailer: no extensions, unsigned
	if extra := l.toBBytes - fresh; extra != intervals*summary || sa.ReplayedRecords != 0 || sb.RequestsSent != 0 ||
		sa.SummariesSent != intervals || sb.SummariesReceived != intervals {
		t.Fatalf("%d bytes beyond the fresh records, want %d summaries of %d; a %+v\nb %+v", extra, intervals, summary, sa, sb)
	}
	if len(l.tb.messages()) != 0 {
		t.Fatalf("b sent %d messages", len(l.tb.messages()))
	}
}

// TestAntiEntropyCurrentState: a connection's record in a lost message is
// re-sent as the cache holds it now (a later state, what is left of its
// timeout), once, though two lost messages carried it.
func TestAntiEntropyCurrentState(t *testing.T) {
	l := newAELink(t)
	l.lose = loseStream(1, 3)
	x := tcp4("198.51.100.9", 4000)
	l.send(x)                       // 1, lost: established, 900 s
	l.send(tcp4("198.51.100.1", 1)) // 2
	l.deliver()
	l.now = l.now.Add(100 * time.Second) // x moves on
	x.state, x.timeout = 5, 120          // FIN_WAIT
	l.send(x)                            // 3, lost
	l.send(tcp4("198.51.100.1", 2))      // 4
	l.deliver()
	l.now = l.now.Add(20 * time.Second)
	from := len(l.ta.messages())
	l.lose = func(message) bool { return false }
	l.check()
	got := l.sentToB(from)
	var recs []rec
	for _, m := range got {
		if m.flags == flagReplay {
			recs = append(recs, m.recs...)
		}
	}
	if len(recs) != 1 {
		t.Fatalf("%d records re-sent, want x once", len(recs))
	}
	r := recs[0]
	if r.key() != rec(x.encode()).key() || r[offState+1] != 5 || r.timeout() > 100 || r.timeout() < 98 {
		t.Fatalf("re-sent state %d, timeout %d: want state 5 and about 100 s left", r[offState+1], r.timeout())
	}
}

// TestAntiEntropyNotHolderAskedAgain: records b refused because it did not
// yet know a holds their VIP are asked for again once it does.
func TestAntiEntropyNotHolderAskedAgain(t *testing.T) {
	l := newAELink(t)
	holds := false
	l.tb.holds = func(string, netip.Addr) bool { return holds }
	l.newConns(3)
	l.deliver()
	holds = true
	l.check()
	if s := l.b.st.snapshot(); s.DroppedNotHolder != 3 || s.AppliedRecords != 3 || s.MissingMessages != 3 {
		t.Fatalf("stats %+v: want the 3 refused records applied when sent again", s)
	}
}

// TestAntiEntropyRequestsRefused: requests that are not an honest member's
// ask are ignored and counted; nothing is sent.
func TestAntiEntropyRequestsRefused(t *testing.T) {
	tests := []struct {
		name    string
		req     func(l *aeLink, b *origin) [][]byte
		refused uint64 // requests_refused
		invalid uint64 // dropped_invalid
		replay  uint64 // dropped_replayed
	}{
		{"from a non-member", func(l *aeLink, b *origin) [][]byte {
			delete(l.a.members, "b")
			return [][]byte{b.requestMessage(request{l.a.self.incarnation, []seqRange{{1, 1}}}, l.now)}
		}, 1, 0, 0},
		{"too soon after the last", func(l *aeLink, b *origin) [][]byte {
			r := request{l.a.self.incarnation, []seqRange{{1, 1}}}
			return [][]byte{b.requestMessage(r, l.now), b.requestMessage(r, l.now)}
		}, 1, 0, 0},
		{"messages not sent", func(l *aeLink, b *origin) [][]byte {
			return [][]byte{b.requestMessage(request{l.a.self.incarnation, []seqRange{{4, 9}}}, l.now)}
		}, 1, 0, 0},
		{"the same request again", func(l *aeLink, b *origin) [][]byte {
			m := b.requestMessage(request{l.a.self.incarnation, []seqRange{{1, 1}}}, l.now)
			return [][]byte{m, m}
		}, 0, 0, 1},
		{"in a's own name", func(l *aeLink, _ *origin) [][]byte {
			return [][]byte{l.a.self.requestMessage(request{l.a.self.incarnation, nil}, l.now)}
		}, 0, 0, 1},
		{"ranges out of order", func(l *aeLink, b *origin) [][]byte {
			return [][]byte{b.requestMessage(request{l.a.self.incarnation, []seqRange{{3, 3}, {1, 1}}}, l.now)}
		}, 0, 1, 0},
		{"too many ranges", func(l *aeLink, b *origin) [][]byte {
			var rs []seqRange
			for i := range maxRequestRanges + 1 {
				rs = append(rs, seqRange{uint64(2*i + 1), uint64(2*i + 1)})
			}
			return [][]byte{b.requestMessage(request{l.a.self.incarnation, rs}, l.now)}
		}, 0, 1, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := newAELink(t)
			l.newConns(3)
			l.deliver()
			from := len(l.ta.messages())
			msgs := tt.req(l, &origin{name: "b", incarnation: 7})
			for _, m := range msgs {
				l.a.deliver(m, l.now)
			}
			l.now = run(l.a, l.now)
			s := l.a.st.snapshot()
			if s.RequestsRefused != tt.refused || s.DroppedInvalid != tt.invalid || s.DroppedReplayed != tt.replay {
				t.Fatalf("stats %+v", s)
			}
			// What was not refused was answered: one record re-sent.
			wantSent := len(msgs) - int(tt.refused+tt.invalid+tt.replay)
			if got := len(l.ta.messages()) - from; got != wantSent || s.ResentRecords != uint64(wantSent) {
				t.Fatalf("a sent %d messages, re-sent %d records; want %d", got, s.ResentRecords, wantSent)
			}
		})
	}
}

// TestRequestMessages: requests and summaries decode to what was encoded;
// malformed ones are refused.
func TestRequestMessages(t *testing.T) {
	b := &origin{name: "b", incarnation: 1, stream: 42}
	req := request{incarnation: 99, ranges: []seqRange{{1, 3}, {5, 5}, {7, 7 + ringSize - 1}}}
	m, err := decodeMessage(b.requestMessage(req, t0))
	if err != nil || m.flags != flagRequest || m.stream != 42 || m.request.incarnation != 99 || len(m.request.ranges) != 3 ||
		m.request.ranges[2] != req.ranges[2] {
		t.Fatalf("%+v, %v", m, err)
	}
	if m, err := decodeMessage(b.summaryMessage(t0)); err != nil || m.flags != flagSummary || m.stream != 42 || m.seq != 2 {
		t.Fatalf("summary %+v, %v", m, err)
	}
	for name, msg := range map[string][]byte{
		"range longer than the ring": b.requestMessage(request{1, []seqRange{{1, ringSize + 1}}}, t0),
		"range from 0":               b.requestMessage(request{1, []seqRange{{0, 1}}}, t0),
		"range backwards":            b.requestMessage(request{1, []seqRange{{5, 4}}}, t0),
		"adjacent ranges":            b.requestMessage(request{1, []seqRange{{1, 2}, {3, 4}}}, t0),
		"truncated":                  b.requestMessage(request{1, []seqRange{{1, 2}}}, t0)[:headerLen("b")+20],
		"summary with a body":        append(b.summaryMessage(t0), 0, 0, 0, 0),
		"fresh without a stream": func() []byte {
			m := msgBuilder{from: &origin{name: "b"}}
			m.add(tcp4("198.51.100.1", 1).encode())
			b, _ := m.finish(0, t0)
			return b
		}(),
	} {
		if _, err := decodeMessage(msg); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if bytes.Equal(b.summaryMessage(t0), b.summaryMessage(t0)) {
		t.Error("two summaries with the same sequence number")
	}
}

// TestAntiEntropyFallback: a request a cannot answer from its ring (an
// earlier incarnation of a, numbers that left the ring, or everything)
// gets b a's whole cache, to b alone, once.
func TestAntiEntropyFallback(t *testing.T) {
	tests := []struct {
		name string
		req  func(a *engine) request
	}{
		{"earlier incarnation", func(a *engine) request { return request{a.self.incarnation - 1, []seqRange{{4000, 5000}}} }},
		{"out of the ring", func(a *engine) request { return request{a.self.incarnation, []seqRange{{1, 1}}} }},
		{"everything", func(a *engine) request { return request{a.self.incarnation, nil} }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := newAELink(t)
			l.a.cfg.MaxRate = 100 // the replay is still running at the second request
			l.newConns(ringSize + 1)
			l.deliver()
			from := len(l.ta.messages())
			b := &origin{name: "b", incarnation: 7}
			l.a.deliver(b.requestMessage(tt.req(l.a), l.now), l.now)
			l.a.tick(l.now)
			l.now = l.now.Add(minRequestGap)
			l.a.deliver(b.requestMessage(tt.req(l.a), l.now), l.now)
			l.now = run(l.a, l.now)
			records := 0
			for _, s := range l.ta.messages()[from:] {
				m, err := decodeMessage(s.msg)
				if err != nil || s.to != "b" {
					t.Fatalf("a sent to %q (%v)", s.to, err)
				}
				records += len(m.recs)
			}
			if s := l.a.st.snapshot(); records != ringSize+1 || s.FallbackReplays != 1 || s.RequestsRefused != 0 {
				t.Fatalf("%d records to b, stats %+v: want the whole cache of %d once", records, s, ringSize+1)
			}
		})
	}
}
