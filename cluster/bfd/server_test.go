package bfd

import (
	"context"
	"io"
	"log/slog"
	"net/netip"
	"sync"
	"testing"
	"time"
)

// memNet connects in-memory transports by address; cut addresses neither
// send nor receive.
type memNet struct {
	mu    sync.Mutex
	nodes map[netip.Addr]*memTransport
	cut   map[netip.Addr]bool
	ttl   int
}

func newMemNet() *memNet {
	return &memNet{nodes: map[netip.Addr]*memTransport{}, cut: map[netip.Addr]bool{}, ttl: 255}
}

func (n *memNet) transport(addr netip.Addr) *memTransport {
	n.mu.Lock()
	defer n.mu.Unlock()
	t := &memTransport{net: n, addr: addr, packets: make(chan Datagram, 64)}
	n.nodes[addr] = t
	return t
}

func (n *memNet) setCut(addr netip.Addr, cut bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.cut[addr] = cut
}

func (n *memNet) deliver(from, to netip.Addr, b []byte) {
	n.mu.Lock()
	dst, ttl := n.nodes[to], n.ttl
	blocked := n.cut[from] || n.cut[to]
	n.mu.Unlock()
	if dst == nil || blocked {
		return
	}
	select {
	case dst.packets <- Datagram{Data: append([]byte(nil), b...), Src: from, Dst: to, TTL: ttl, At: time.Now()}:
	default: // a full queue drops, like a socket buffer
	}
}

type memTransport struct {
	net     *memNet
	addr    netip.Addr
	packets chan Datagram
}

func (t *memTransport) Open(_, peer netip.Addr, _ string) (Conn, error) {
	return memConn{t: t, to: peer}, nil
}
func (t *memTransport) Packets() <-chan Datagram { return t.packets }
func (t *memTransport) Close() error             { return nil }

type memConn struct {
	t  *memTransport
	to netip.Addr
}

func (c memConn) Send(b []byte) error { c.t.net.deliver(c.t.addr, c.to, b); return nil }
func (c memConn) Close() error        { return nil }

var (
	addrA = netip.MustParseAddr("10.0.0.1")
	addrB = netip.MustParseAddr("10.0.0.2")
	// 10 ms × 10: fast, yet a 100 ms scheduling stall under -race and a
	// loaded machine is needed for a spurious detection.
	fast  = Timers{DesiredMinTx: 10 * time.Millisecond, RequiredMinRx: 10 * time.Millisecond, DetectMult: 10}
	quiet = slog.New(slog.NewTextHandler(io.Discard, nil))
)

// watcher collects changes and waits for one matching a condition.
type watcher struct {
	ch chan Change
}

func watch(s interface{ Subscribe(func(Change)) func() }) *watcher {
	w := &watcher{ch: make(chan Change, 256)}
	s.Subscribe(func(c Change) { w.ch <- c })
	return w
}

// waitFor waits (up to a generous bound: no timing is asserted) for a
// change of peer into st that also satisfies the optional conditions.
func (w *watcher) waitFor(t *testing.T, peer netip.Addr, st State, conds ...func(Change) bool) Change {
	t.Helper()
	deadline := time.After(20 * time.Second)
	for {
		select {
		case c := <-w.ch:
			ok := c.Peer == peer && c.State == st
			for _, cond := range conds {
				ok = ok && cond(c)
			}
			if ok {
				return c
			}
		case <-deadline:
			t.Fatalf("no change of %s to %v", peer, st)
		}
	}
}

func remoteAdminDown(c Change) bool { return c.RemoteState == AdminDown }

func startPair(t *testing.T, n *memNet) (a, b *Server, wa, wb *watcher) {
	t.Helper()
	var err error
	a, err = Start(Config{Timers: fast, Log: quiet, Transport: n.transport(addrA)})
	if err != nil {
		t.Fatal(err)
	}
	b, err = Start(Config{Timers: fast, Log: quiet, Transport: n.transport(addrB)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		a.Close(ctx)
		b.Close(ctx)
	})
	wa, wb = watch(a), watch(b)
	ctx := context.Background()
	if err := a.AddPeer(ctx, PeerConfig{Peer: addrB, Local: addrA}); err != nil {
		t.Fatal(err)
	}
	if err := b.AddPeer(ctx, PeerConfig{Peer: addrA, Local: addrB}); err != nil {
		t.Fatal(err)
	}
	return a, b, wa, wb
}

func TestServerSessionsComeUpAndDetectACut(t *testing.T) {
	n := newMemNet()
	a, _, wa, wb := startPair(t, n)
	wa.waitFor(t, addrB, Up)
	wb.waitFor(t, addrA, Up)
	// Both advertise 10 ms once Up; until B's next packet A still uses the
	// second B advertised while not Up.
	for i := 0; ; i++ {
		peers, err := a.Peers(context.Background())
		if err != nil || len(peers) != 1 {
			t.Fatalf("peers %+v, %v", peers, err)
		}
		if p := peers[0]; p.State == Up && p.RemoteDiscr != 0 && p.TxInterval == 10*time.Millisecond &&
			p.DetectionTime == 100*time.Millisecond && !p.Polling {
			break
		}
		if i > 4000 {
			t.Fatalf("timers never negotiated: %+v", peers[0])
		}
		time.Sleep(5 * time.Millisecond)
	}

	n.setCut(addrB, true)
	c := wa.waitFor(t, addrB, Down)
	if c.Diag != DiagDetectionExpired || c.Old != Up {
		t.Errorf("cut: %+v, want detection time expired from up", c)
	}
	wb.waitFor(t, addrA, Down)
	n.setCut(addrB, false)
	wa.waitFor(t, addrB, Up)
	wb.waitFor(t, addrA, Up)
}

func TestServerCloseSignalsAdminDown(t *testing.T) {
	n := newMemNet()
	a, _, wa, wb := startPair(t, n)
	wa.waitFor(t, addrB, Up)
	wb.waitFor(t, addrA, Up)
	if err := a.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	// (A spurious flap before the close would not match.)
	c := wb.waitFor(t, addrA, Down, remoteAdminDown)
	if c.Diag != DiagNeighborDown {
		t.Errorf("after close: %+v, want neighbor signaled", c)
	}
	if err := a.AddPeer(context.Background(), PeerConfig{Peer: addrB}); err != ErrClosed {
		t.Errorf("AddPeer after Close: %v", err)
	}
}

func TestServerRemovePeerSignalsAdminDown(t *testing.T) {
	n := newMemNet()
	a, _, wa, wb := startPair(t, n)
	wa.waitFor(t, addrB, Up)
	wb.waitFor(t, addrA, Up)
	if err := a.RemovePeer(context.Background(), addrB); err != nil {
		t.Fatal(err)
	}
	wb.waitFor(t, addrA, Down, remoteAdminDown)
	if peers, _ := a.Peers(context.Background()); len(peers) != 0 {
		t.Errorf("peers after remove: %+v", peers)
	}
}

func TestServerDropsPacketsBelowTTL255(t *testing.T) {
	n := newMemNet()
	n.ttl = 254
	a, _, _, _ := startPair(t, n)
	// Both send their first packet at once; wait until some arrived.
	for i := 0; ; i++ {
		st, err := a.Stats(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if st.BadTTL > 0 {
			if st.Malformed+st.NoSession != 0 {
				t.Errorf("stats %+v", st)
			}
			break
		}
		if i > 2000 {
			t.Fatal("no packet arrived")
		}
		time.Sleep(5 * time.Millisecond)
	}
	peers, _ := a.Peers(context.Background())
	if len(peers) != 1 || peers[0].State != Down || peers[0].RemoteDiscr != 0 {
		t.Errorf("a session came up from packets with TTL 254: %+v", peers)
	}
}

func TestServerMatchesSessionsByDiscriminatorAndSource(t *testing.T) {
	n := newMemNet()
	a, _, wa, _ := startPair(t, n)
	wa.waitFor(t, addrB, Up)
	peers, _ := a.Peers(context.Background())
	mine := peers[0].LocalDiscr
	other := netip.MustParseAddr("10.0.0.66")
	spoof := n.transport(other)
	conn, _ := spoof.Open(other, addrA, "")
	down := Packet{State: Down, DetectMult: 3, MyDiscriminator: 7, YourDiscriminator: mine,
		DesiredMinTxInterval: 1_000_000, RequiredMinRxInterval: 10_000}
	conn.Send(down.Append(nil))
	unknown := Packet{State: Down, DetectMult: 3, MyDiscriminator: 7, DesiredMinTxInterval: 1_000_000,
		RequiredMinRxInterval: 10_000}
	conn.Send(unknown.Append(nil))
	conn.Send([]byte{1, 2, 3})
	for i := 0; ; i++ {
		st, _ := a.Stats(context.Background())
		if st.WrongSource == 1 && st.NoSession == 1 && st.Malformed == 1 {
			break
		}
		if i > 2000 {
			t.Fatalf("stats %+v", st)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestServerAddPeerValidates(t *testing.T) {
	s, err := Start(Config{Log: quiet, Transport: newMemNet().transport(addrA)})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	ctx := context.Background()
	for _, p := range []PeerConfig{
		{},
		{Peer: addrB, Local: netip.MustParseAddr("fd00::1")},
		{Peer: netip.MustParseAddr("fe80::1")},
	} {
		if err := s.AddPeer(ctx, p); err == nil {
			t.Errorf("AddPeer(%+v) accepted", p)
		}
	}
	// Adding again updates the timers of the same session.
	if err := s.AddPeer(ctx, PeerConfig{Peer: addrB}); err != nil {
		t.Fatal(err)
	}
	before, _ := s.Peers(ctx)
	if err := s.AddPeer(ctx, PeerConfig{Peer: addrB, Timers: Timers{RequiredMinRx: 300 * time.Millisecond}}); err != nil {
		t.Fatal(err)
	}
	after, _ := s.Peers(ctx)
	if len(after) != 1 || after[0].LocalDiscr != before[0].LocalDiscr {
		t.Errorf("re-adding replaced the session: %+v -> %+v", before, after)
	}
}

func TestFakeNotifies(t *testing.T) {
	f := NewFake()
	w := watch(f)
	ctx := context.Background()
	if err := f.AddPeer(ctx, PeerConfig{Peer: addrB}); err != nil {
		t.Fatal(err)
	}
	if !f.SetState(addrB, Up, DiagNone, Up) || f.SetState(addrB, Up, DiagNone, Up) {
		t.Error("SetState reports changes wrongly")
	}
	if c := w.waitFor(t, addrB, Up); c.Old != Down {
		t.Errorf("change %+v", c)
	}
	f.RemovePeer(ctx, addrB)
	if f.SetState(addrB, Down, DiagNone, Down) {
		t.Error("SetState on a removed peer")
	}
	if got := f.Ops(); len(got) != 2 || got[0] != "add 10.0.0.2" || got[1] != "remove 10.0.0.2" {
		t.Errorf("ops %v", got)
	}
}
