package connsync

import (
	"bytes"
	"crypto/ed25519"
	"log/slog"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/lvsd/lvsd/cluster/identity"
)

func TestServicesLookup(t *testing.T) {
	vip, vip6 := netip.MustParseAddr("192.0.2.10"), netip.MustParseAddr("2001:db8::10")
	markVIP := netip.MustParseAddr("192.0.2.20")
	const mark = 0x10000001
	ix := indexServices(append(testServices(),
		Service{VIP: markVIP, FWMark: mark, Dests: []netip.AddrPort{netip.MustParseAddrPort("10.0.0.5:0"), netip.MustParseAddrPort("10.0.0.6:8080")}},
		Service{VIP: vip, Protocol: protoUDP, Port: 53, Dests: []netip.AddrPort{netip.MustParseAddrPort("10.0.0.5:53")}}))
	conn := func(f func(*testConn)) []byte { c := tcp4("198.51.100.7", 40000); f(&c); return c.encode() }
	marked := func(vport, dport uint16, daddr string) func(*testConn) {
		return func(c *testConn) {
			c.fwmark, c.vaddr, c.vport, c.dport, c.daddr = mark, markVIP, vport, dport, netip.MustParseAddr(daddr)
		}
	}
	template := func(vaddr netip.Addr, dport uint16) func(*testConn) {
		return func(c *testConn) {
			c.proto, c.flags, c.cport, c.vport, c.dport, c.vaddr = protoIP, connFTemplate, 0, 0, dport, vaddr
		}
	}
	markAddr := netip.AddrFrom4([4]byte{0x10, 0, 0, 1})
	markAddr6 := netip.AddrFrom16([16]byte{0x10, 0, 0, 1})
	tests := []struct {
		name string
		rec  []byte
		want netip.Addr // invalid: refused
	}{
		{"configured connection", conn(func(*testConn) {}), vip},
		{"configured IPv6 connection", tcp6("2001:db8::7", 1).encode(), vip6},
		{"UDP service on the same VIP", conn(func(c *testConn) { c.proto, c.state, c.vport, c.dport = protoUDP, 0, 53, 53 }), vip},
		{"unconfigured real server", conn(func(c *testConn) { c.daddr = netip.MustParseAddr("203.0.113.66") }), netip.Addr{}},
		{"configured real server, other port", conn(func(c *testConn) { c.dport = 81 }), netip.Addr{}},
		{"unconfigured port", conn(func(c *testConn) { c.vport = 81 }), netip.Addr{}},
		{"unconfigured protocol", conn(func(c *testConn) { c.proto, c.state = protoSCTP, 0 }), netip.Addr{}},
		{"unconfigured VIP", conn(func(c *testConn) { c.vaddr = netip.MustParseAddr("192.0.2.99") }), netip.Addr{}},
		{"persistence template of an address service", conn(func(c *testConn) { c.flags, c.cport = connFTemplate, 0 }), vip},
		{"a mark that is no service of ours: found by address", conn(func(c *testConn) { c.fwmark = 7 }), vip},
		{"mark service, client's port kept", conn(marked(4443, 4443, "10.0.0.5")), markVIP},
		{"mark service, port changed", conn(marked(4443, 4444, "10.0.0.5")), netip.Addr{}},
		{"mark service, real server with a port", conn(marked(4443, 8080, "10.0.0.6")), markVIP},
		{"mark service, another VIP", conn(func(c *testConn) { marked(4443, 4443, "10.0.0.5")(c); c.vaddr = vip }), netip.Addr{}},
		{"mark service, unconfigured real server", conn(marked(4443, 4443, "10.0.0.7")), netip.Addr{}},
		{"mark template", conn(template(markAddr, 0)), markVIP},
		{"mark template with a port", conn(template(markAddr, 80)), netip.Addr{}},
		{"template of an unconfigured mark", conn(template(netip.AddrFrom4([4]byte{0x10, 0, 0, 2}), 0)), netip.Addr{}},
		{"IPv6 mark template", tcp6Template(markAddr6), netip.Addr{}}, // real server 2001:db8:1::5 is not the mark service's
		{"IPv6 mark template, stray bytes", tcp6Template(netip.AddrFrom16([16]byte{0x10, 0, 0, 1, 15: 1})), netip.Addr{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := ix.lookup(rec(tt.rec))
			if ok != tt.want.IsValid() || got != tt.want {
				t.Fatalf("lookup = %v, %v; want %v", got, ok, tt.want)
			}
		})
	}
	if _, ok := (*services)(nil).lookup(rec(conn(func(*testConn) {}))); ok {
		t.Error("a record was authorised before any service was configured")
	}
	// The IPv6 template of a mark service with an IPv6 real server.
	ix6 := indexServices([]Service{{VIP: vip6, FWMark: mark, Dests: []netip.AddrPort{netip.MustParseAddrPort("[2001:db8:1::5]:0")}}})
	if got, ok := ix6.lookup(rec(tcp6Template(markAddr6))); !ok || got != vip6 {
		t.Errorf("IPv6 mark template: %v, %v", got, ok)
	}
}

func tcp6Template(vaddr netip.Addr) []byte {
	c := tcp6("2001:db8::7", 0)
	c.proto, c.flags, c.vport, c.dport, c.vaddr = protoIP, connFTemplate, 0, 0, vaddr
	return c.encode()
}

// TestDeliverRefusals: what a peer may not send is dropped, counted, and
// logged the first time per kind and sender.
func TestDeliverRefusals(t *testing.T) {
	var buf bytes.Buffer
	e, tr, w := testEngine(t, Config{Log: slog.New(slog.NewTextHandler(&buf, nil))})
	vip := netip.MustParseAddr("192.0.2.10")
	tr.holds = func(sender string, v netip.Addr) bool { return sender == "b" && v == vip }
	ok := tcp4("198.51.100.1", 1)
	stranger := tcp4("198.51.100.2", 1)
	stranger.daddr = netip.MustParseAddr("203.0.113.66")
	b, c := peerB(), &origin{name: "c", incarnation: 9}
	at := t0
	deliver := func(msg []byte) { e.deliver(msg, at) }

	deliver(b.message(0, at, ok.encode(), stranger.encode(), stranger.encode()))
	deliver(c.message(0, at, ok.encode())) // c does not hold the VIP
	deliver(c.message(0, at, ok.encode()))
	replay := b.message(0, at, ok.encode())
	deliver(replay)
	deliver(replay)
	deliver(b.message(0, at.Add(-time.Minute), ok.encode()))
	deliver(b.message(0, at.Add(time.Minute), ok.encode()))
	deliver((&origin{name: "self", incarnation: 1}).message(0, at, ok.encode())) // ours, sent back

	s := e.st.snapshot()
	want := Stats{ReceivedMessages: 4, ReceivedRecords: 6, AppliedDatagrams: 2, AppliedRecords: 2, DroppedUnconfigured: 2,
		DroppedNotHolder: 2, DroppedReplayed: 2, DroppedTooOld: 1, DroppedFuture: 1}
	s.LastLag, s.MaxLag = 0, 0
	if s != want {
		t.Errorf("stats\n%+v\nwant\n%+v", s, want)
	}
	if len(w.written) != 2 {
		t.Errorf("%d datagrams written, want 2 (b's one good record, twice)", len(w.written))
	}
	log := buf.String()
	for _, line := range []string{
		"refused relayed connections of a service or real server not configured here\" peer=b vip=192.0.2.10 port=80 protocol=6 fwmark=0 backend=203.0.113.66:80",
		"refused relayed connections of a VIP the sender does not hold\" peer=c vip=192.0.2.10",
		"refused a replayed relay message\" peer=b why=\"sequence number 2 seen already",
		"refused an old relay message: a replay, or the clocks of the directors disagree\" peer=b why=\"sent 1m0s ago",
		"refused a relay message from the future: the clocks of the directors disagree\" peer=b why=\"sent 1m0s in the future",
		"refused a replayed relay message\" peer=self why=\"this director's own message\"",
	} {
		if strings.Count(log, line) != 1 {
			t.Errorf("want once in the log: %s", line)
		}
	}
	if n := strings.Count(log, "\n"); n != 6 {
		t.Errorf("%d log lines, want 6 (the first of each kind per sender):\n%s", n, log)
	}
}

// A relay without an Authority refuses everything, and so does one with
// no services yet.
func TestDeliverDeniedByDefault(t *testing.T) {
	e, _, w := testEngine(t, Config{})
	e.cfg.Authority = nil
	b := peerB()
	e.deliver(b.message(0, t0, tcp4("198.51.100.1", 1).encode()), t0)
	e.services = func() *services { return nil }
	e.deliver(b.message(0, t0, tcp4("198.51.100.1", 1).encode()), t0)
	if s := e.st.snapshot(); s.DroppedNotHolder != 1 || s.DroppedUnconfigured != 1 || len(w.written) != 0 {
		t.Errorf("stats %+v, %d written", s, len(w.written))
	}
}

// FuzzDeliver feeds any message to a receiving engine: nothing panics,
// only what is configured and sent by the VIP's holder reaches the backup,
// and whatever a message makes the engine send (a request's answer) goes to
// its sender alone.
func FuzzDeliver(f *testing.F) {
	markTemplate := tcp4("198.51.100.7", 0)
	markTemplate.proto, markTemplate.flags, markTemplate.vport, markTemplate.dport = protoIP, connFTemplate, 0, 0
	markTemplate.vaddr = netip.AddrFrom4([4]byte{0x10, 0, 0, 1})
	f.Add(peerB().message(0, t0, tcp4("198.51.100.7", 1).encode(), tcp6("2001:db8::7", 1).encode()))
	f.Add((&origin{name: "c", incarnation: 3}).message(flagReplay, t0, tcp4("198.51.100.7", 1).encode(), markTemplate.encode()))
	f.Add((&origin{name: "b", incarnation: 3, stream: 2}).summaryMessage(t0))
	f.Add((&origin{name: "b", incarnation: 3}).requestMessage(request{uint64(t0.UnixNano()), []seqRange{{1, 1}}}, t0))
	f.Add((&origin{name: "b", incarnation: 3}).requestMessage(request{1, nil}, t0))
	signedB := &origin{name: "b", incarnation: 4, keys: testKeys["b"]}
	f.Add(signedB.message(0, t0, tcp4("198.51.100.7", 1).encode()))
	f.Add(signedB.requestMessage(request{1, nil}, t0))
	vip := netip.MustParseAddr("192.0.2.10")
	f.Fuzz(func(t *testing.T, b []byte) {
		e, tr, w := testEngine(t, Config{})
		e.members["b"] = true
		e.fromMaster(datagram(1, tcp4("198.51.100.9", 9).encode()), t0) // something to answer with
		e.flush(t0)
		before := len(tr.messages())
		e.services = func() *services {
			return indexServices(append(testServices(), Service{VIP: vip, FWMark: 0x10000001,
				Dests: []netip.AddrPort{netip.MustParseAddrPort("10.0.0.5:0")}}))
		}
		tr.holds = func(sender string, v netip.Addr) bool { return sender == "b" && v == vip }
		e.deliver(b, t0)
		e.deliver(b, t0) // a replay is refused
		run(e, t0)
		m, _ := decodeMessage(b)
		for _, s := range tr.messages()[before:] {
			if s.to != m.sender || s.to == "" {
				t.Fatalf("a message from %q made the engine send to %q", m.sender, s.to)
			}
		}
		if len(w.written) > 1 {
			t.Fatalf("%d datagrams written for one message", len(w.written))
		}
		for _, d := range w.written {
			_, recs, err := parseDatagram(d)
			if err != nil {
				t.Fatalf("wrote an invalid datagram: %v", err)
			}
			for _, r := range recs {
				if got, ok := e.services().lookup(r); !ok || got != vip || m.sender != "b" {
					t.Fatalf("applied a record of %v (configured: %v) from %q", got, ok, m.sender)
				}
			}
		}
		// With identities, nothing is applied or answered unless b signed it.
		ei, tri, wi := testEngine(t, Config{Identity: enforcing()})
		ei.members["b"] = true
		ei.services = e.services
		tri.holds = tr.holds
		ei.deliver(b, t0)
		run(ei, t0)
		proven := m.sig != nil && m.version >= msgVersion && ed25519.Verify(identity.Public(testKeys["b"].Private), m.signed, m.sig)
		if (len(wi.written) > 0 || len(tri.messages()) > 0) && !proven {
			t.Fatalf("an unproven message from %q was applied or answered", m.sender)
		}
	})
}
