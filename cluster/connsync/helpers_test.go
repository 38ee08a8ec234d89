package connsync

import (
	"encoding/binary"
	"errors"
	"net/netip"
	"sync"
	"testing"
	"time"
)

// testConn is a connection record to encode as the kernel does in
// ip_vs_sync_conn (net/netfilter/ipvs/ip_vs_sync.c).
type testConn struct {
	proto               uint8
	flags               uint32
	state               uint16
	cport, vport, dport uint16
	fwmark, timeout     uint32
	caddr, vaddr, daddr netip.Addr // all IPv4 or all IPv6
	seq                 bool       // add IPVS_OPT_SEQ_DATA
	peData, peName      string     // add IPVS_OPT_PE_DATA and IPVS_OPT_PE_NAME
}

// encode lays out struct ip_vs_sync_v4 / ip_vs_sync_v6 field by field:
//
//	u8 type, u8 protocol, be16 ver_size, be32 flags, be16 state,
//	be16 cport, be16 vport, be16 dport, be32 fwmark, be32 timeout,
//	caddr, vaddr, daddr (4 or 16 bytes each), then the options.
func (c testConn) encode() []byte {
	var typ byte
	if c.caddr.Is6() {
		typ = 1 // STYPE_F_INET6
	}
	b := []byte{typ, c.proto, 0, 0} // ver_size is set below
	b = binary.BigEndian.AppendUint32(b, c.flags)
	b = binary.BigEndian.AppendUint16(b, c.state)
	b = binary.BigEndian.AppendUint16(b, c.cport)
	b = binary.BigEndian.AppendUint16(b, c.vport)
	b = binary.BigEndian.AppendUint16(b, c.dport)
	b = binary.BigEndian.AppendUint32(b, c.fwmark)
	b = binary.BigEndian.AppendUint32(b, c.timeout)
	b = append(b, c.caddr.AsSlice()...)
	b = append(b, c.vaddr.AsSlice()...)
	b = append(b, c.daddr.AsSlice()...)
	if c.seq {
		b = append(b, 1, 24) // in_seq and out_seq: init_seq, delta, previous_delta
		for i := range 6 {
			b = binary.BigEndian.AppendUint32(b, uint32(1000+i))
		}
	}
	if c.peData != "" {
		b = append(b, 2, byte(len(c.peData)))
		b = append(b, c.peData...)
	}
	if c.peName != "" {
		b = append(b, 3, byte(len(c.peName)))
		b = append(b, c.peName...)
	}
	binary.BigEndian.PutUint16(b[2:], uint16(len(b))) // version 0 in the high 4 bits
	return b
}

// datagram builds what the master daemon sends: struct ip_vs_sync_mesg
// (u8 reserved 0, u8 syncid, be16 size, u8 nr_conns, s8 version 1, u16
// spare 0), then the records, each starting at a multiple of 4 bytes.
func datagram(syncID uint8, recs ...[]byte) []byte {
	b := []byte{0, syncID, 0, 0, byte(len(recs)), 1, 0, 0}
	for i, r := range recs {
		for i > 0 && len(b)%4 != 0 {
			b = append(b, 0)
		}
		b = append(b, r...)
	}
	binary.BigEndian.PutUint16(b[2:], uint16(len(b)))
	return b
}

func tcp4(client string, cport uint16) testConn {
	return testConn{
		proto: protoTCP, flags: 0x0003 /* DROUTE */, state: 1, /* ESTABLISHED */
		cport: cport, vport: 80, dport: 80, timeout: 900,
		caddr: netip.MustParseAddr(client), vaddr: netip.MustParseAddr("192.0.2.10"), daddr: netip.MustParseAddr("10.0.0.5"),
	}
}

func tcp6(client string, cport uint16) testConn {
	c := tcp4("0.0.0.0", cport)
	c.caddr, c.vaddr, c.daddr = netip.MustParseAddr(client), netip.MustParseAddr("2001:db8::10"), netip.MustParseAddr("2001:db8:1::5")
	return c
}

// fakeTransport records what the relay sends and, when peers are set,
// delivers it to them as the cluster would. As the Authority it lets
// every director send every VIP unless holds says otherwise.
type fakeTransport struct {
	name  string // "self" if empty
	mu    sync.Mutex
	sent  []sentMsg
	peers map[string]*Relay
	holds func(sender string, vip netip.Addr) bool
	// lose, when set, says which messages to a peer are lost on the way
	// (still recorded as sent).
	lose func(to string, msg []byte) bool
}

func (f *fakeTransport) Name() string {
	if f.name == "" {
		return "self"
	}
	return f.name
}

func (f *fakeTransport) MaySend(sender string, vip netip.Addr) bool {
	return f.holds == nil || f.holds(sender, vip)
}

type sentMsg struct {
	to  string // "" for a broadcast
	msg []byte
}

func (f *fakeTransport) Broadcast(msg []byte) {
	f.mu.Lock()
	f.sent = append(f.sent, sentMsg{msg: msg})
	peers := f.peers
	f.mu.Unlock()
	for name, p := range peers {
		if f.lose == nil || !f.lose(name, msg) {
			p.Deliver(msg)
		}
	}
}

func (f *fakeTransport) SendTo(member string, msg []byte) {
	f.mu.Lock()
	f.sent = append(f.sent, sentMsg{to: member, msg: msg})
	p := f.peers[member]
	f.mu.Unlock()
	if p != nil && (f.lose == nil || !f.lose(member, msg)) {
		p.Deliver(msg)
	}
}

func (f *fakeTransport) messages() []sentMsg {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]sentMsg(nil), f.sent...)
}

// fakeSockets stand in for the master's and backup's sockets.
type fakeSockets struct {
	master  chan []byte // datagrams "sent by the master daemon"
	closed  chan struct{}
	once    sync.Once
	mu      sync.Mutex
	written [][]byte // datagrams written for the backup daemon
	notify  chan struct{}
	failErr error       // Write fails with it when set
	kernel  *fakeKernel // when set, takes what is written as a backup daemon would
}

func newFakeSockets() *fakeSockets {
	return &fakeSockets{master: make(chan []byte, 16), closed: make(chan struct{}), notify: make(chan struct{}, 1)}
}

func (f *fakeSockets) open(Config) (datagramReader, datagramWriter, error) { return f, f, nil }

func (f *fakeSockets) Read(b []byte) (int, error) {
	select {
	case d := <-f.master:
		return copy(b, d), nil
	case <-f.closed:
		return 0, errors.New("closed")
	}
}

func (f *fakeSockets) Write(b []byte) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.failErr != nil {
		return f.failErr
	}
	f.written = append(f.written, append([]byte(nil), b...))
	if f.kernel != nil {
		f.kernel.take(b)
	}
	select {
	case f.notify <- struct{}{}:
	default:
	}
	return nil
}

func (f *fakeSockets) Close() error {
	f.once.Do(func() { close(f.closed) })
	return nil
}

// waitWritten waits until n datagrams were written and returns them.
func (f *fakeSockets) waitWritten(t *testing.T, n int) [][]byte {
	t.Helper()
	deadline := time.After(5 * time.Second)
	for {
		f.mu.Lock()
		w := append([][]byte(nil), f.written...)
		f.mu.Unlock()
		if len(w) >= n {
			return w
		}
		select {
		case <-f.notify:
		case <-deadline:
			t.Fatalf("%d datagrams written, want %d", len(w), n)
		}
	}
}

// fakeWriter collects datagrams for engine tests.
type fakeWriter struct{ written [][]byte }

func (w *fakeWriter) Write(b []byte) error {
	w.written = append(w.written, append([]byte(nil), b...))
	return nil
}
func (w *fakeWriter) Close() error { return nil }

// testEngine returns an engine with defaults, its transport and writer.
func testEngine(t testing.TB, cfg Config) (*engine, *fakeTransport, *fakeWriter) {
	t.Helper()
	tr, ok := cfg.Transport.(*fakeTransport)
	if !ok {
		tr = &fakeTransport{}
	}
	cfg.Transport = tr
	if err := cfg.setDefaults(); err != nil {
		t.Fatal(err)
	}
	w := &fakeWriter{}
	e := newEngine(cfg, &counters{}, cfg.Log, w, t0)
	ix := indexServices(testServices())
	e.services = func() *services { return ix }
	return e, tr, w
}

// testServices are the services of tcp4 and tcp6 connections.
func testServices() []Service {
	return []Service{
		{VIP: netip.MustParseAddr("192.0.2.10"), Protocol: protoTCP, Port: 80, Dests: []netip.AddrPort{netip.MustParseAddrPort("10.0.0.5:80")}},
		{VIP: netip.MustParseAddr("2001:db8::10"), Protocol: protoTCP, Port: 80, Dests: []netip.AddrPort{netip.MustParseAddrPort("[2001:db8:1::5]:80")}},
	}
}

// peerB is director b's relay as the tests' messages come from it.
func peerB() *origin { return &origin{name: "b", incarnation: 1} }

// message builds o's next relay message of records; one without flags is
// o's next fresh broadcast.
func (o *origin) message(flags byte, sent time.Time, recs ...[]byte) []byte {
	if flags == 0 {
		o.stream++
	}
	m := msgBuilder{from: o}
	for _, r := range recs {
		m.add(r)
	}
	msg, _ := m.finish(flags, sent)
	return msg
}

var t0 = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
