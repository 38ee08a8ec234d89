package vrrp

import (
	"context"
	"net/netip"
	"slices"
	"sync"
	"testing"
	"time"
)

// fakeLink delivers every advertisement sent to the other conns on it, as
// a multicast group on one segment does.
type fakeLink struct {
	mu    sync.Mutex
	conns []*fakeConn
}

type fakeConn struct {
	link    *fakeLink
	primary netip.Addr
	in      chan Packet
	close   sync.Once
	closed  chan struct{}

	mu   sync.Mutex
	sent []Advert
}

func (l *fakeLink) conn(primary string) *fakeConn {
	c := &fakeConn{link: l, primary: netip.MustParseAddr(primary), in: make(chan Packet, 16), closed: make(chan struct{})}
	l.mu.Lock()
	l.conns = append(l.conns, c)
	l.mu.Unlock()
	return c
}

func (c *fakeConn) Primary() netip.Addr { return c.primary }

func (c *fakeConn) Send(b []byte) error {
	a, err := Parse(b, c.primary, GroupV4, TTL)
	if err != nil {
		return err
	}
	c.mu.Lock()
	c.sent = append(c.sent, a)
	c.mu.Unlock()
	c.link.mu.Lock()
	defer c.link.mu.Unlock()
	for _, o := range c.link.conns {
		if o != c {
			o.deliver(Packet{Src: c.primary, Dst: GroupV4, TTL: TTL, Data: slices.Clone(b)})
		}
	}
	return nil
}

func (c *fakeConn) deliver(p Packet) {
	select {
	case <-c.closed:
	case c.in <- p:
	default:
	}
}

func (c *fakeConn) Read() (Packet, error) {
	select {
	case p := <-c.in:
		return p, nil
	case <-c.closed:
		return Packet{}, ErrClosed
	}
}

func (c *fakeConn) Close() error {
	c.close.Do(func() { close(c.closed) })
	return nil
}

func (c *fakeConn) sentPriorities() []uint8 {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []uint8
	for _, a := range c.sent {
		out = append(out, a.Priority)
	}
	return out
}

var vip = netip.MustParseAddr("10.0.0.50")

func startRouter(t *testing.T, c Conn, prio uint8) *Router {
	t.Helper()
	r, err := Start(t.Context(), Config{VRID: 51, Priority: prio, Interval: 5, Preempt: true}, c)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Stop(context.Background()) })
	return r
}

// waitFor polls cond every 5 ms for up to 5 s: the timers run on the real
// clock here (the machine's own tests use a given one).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within 5s: %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestRoutersElectOneMasterAndFailOver(t *testing.T) {
	var link fakeLink
	ca, cb := link.conn("10.0.0.11"), link.conn("10.0.0.12")
	a, b := startRouter(t, ca, 150), startRouter(t, cb, 100)
	if a.Holds(vip) || a.State() != Initialize {
		t.Fatalf("a router serving nothing holds or runs: %s", a.State())
	}
	b.Serve([]netip.Addr{vip})
	a.Serve([]netip.Addr{vip, netip.MustParseAddr("fd00::50")}) // another family: not this router's
	waitFor(t, "a master, b backup", func() bool { return a.State() == Master && b.State() == Backup })
	if !a.Holds(vip) || b.Holds(vip) || a.Holds(netip.MustParseAddr("10.0.0.99")) {
		t.Errorf("holds: a %v, b %v, a an unserved VIP %v", a.Holds(vip), b.Holds(vip), a.Holds(netip.MustParseAddr("10.0.0.99")))
	}
	select {
	case <-a.Changed():
	default:
		t.Error("a became master without a value on Changed")
	}

	stopped := time.Now()
	if err := a.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	if p := ca.sentPriorities(); len(p) == 0 || p[len(p)-1] != 0 {
		t.Errorf("a stopped without priority 0 last: sent %v", p)
	}
	if a.Holds(vip) || a.Healthy() {
		t.Error("a stopped router holds the VIP or says it runs")
	}
	waitFor(t, "b master", func() bool { return b.State() == Master })
	// Skew_Time is 30 ms; Master_Down_Interval would be 180 ms.
	if took := time.Since(stopped); took > 150*time.Millisecond {
		t.Logf("b took over after %v (priority 0 should make it ~30 ms; a loaded host is slower)", took)
	}
	if !b.Holds(vip) {
		t.Error("the new master does not hold the VIP")
	}
}

func TestRouterPreemptsWhenAHigherOneComes(t *testing.T) {
	var link fakeLink
	b := startRouter(t, link.conn("10.0.0.12"), 100)
	b.Serve([]netip.Addr{vip})
	waitFor(t, "b master alone", func() bool { return b.State() == Master })
	a := startRouter(t, link.conn("10.0.0.11"), 150)
	a.Serve([]netip.Addr{vip})
	waitFor(t, "a master, b backup", func() bool { return a.State() == Master && b.State() == Backup })
}

func TestRouterCountsDrops(t *testing.T) {
	var link fakeLink
	c := link.conn("10.0.0.11")
	r := startRouter(t, c, 100)
	r.Serve([]netip.Addr{vip})
	good, err := Advert{VRID: 51, Priority: 200, Interval: 5, Addresses: []netip.Addr{vip}}.Marshal(netip.MustParseAddr("10.0.0.12"), GroupV4)
	if err != nil {
		t.Fatal(err)
	}
	other, _ := Advert{VRID: 52, Priority: 200, Interval: 5, Addresses: []netip.Addr{vip}}.Marshal(netip.MustParseAddr("10.0.0.12"), GroupV4)
	from := netip.MustParseAddr("10.0.0.12")
	c.deliver(Packet{Src: from, Dst: GroupV4, TTL: 64, Data: good})
	c.deliver(Packet{Src: from, Dst: GroupV4, TTL: TTL, Data: other})
	c.deliver(Packet{Src: from, Dst: GroupV4, TTL: TTL, Data: good[:5]})
	waitFor(t, "three drops counted", func() bool {
		d := r.Drops()
		return d[ErrTTL.Error()] == 1 && d[ErrVRID.Error()] == 1 && d[ErrShort.Error()] == 1
	})
	// None of them was taken for a master: this router takes over.
	waitFor(t, "master", func() bool { return r.State() == Master })
}

func TestStartRefuses(t *testing.T) {
	var link fakeLink
	for _, cfg := range []Config{{VRID: 1, Priority: 255, Interval: 100}, {VRID: 1, Priority: 0, Interval: 100}, {VRID: 1, Priority: 100}} {
		if _, err := Start(t.Context(), cfg, link.conn("10.0.0.11")); err == nil {
			t.Errorf("started with %+v", cfg)
		}
	}
}

func TestRouterStatusNamesTheMasterAndCountsTakeovers(t *testing.T) {
	var link fakeLink
	a := startRouter(t, link.conn("10.0.0.11"), 150)
	a.Serve([]netip.Addr{vip})
	waitFor(t, "a master alone", func() bool { return a.State() == Master })
	b := startRouter(t, link.conn("10.0.0.12"), 100)
	b.Serve([]netip.Addr{vip})
	waitFor(t, "b backup of a", func() bool { return b.Status().Master == netip.MustParseAddr("10.0.0.11") })
	want := Status{VRID: 51, Priority: 100, Interval: 5, State: Backup, Master: netip.MustParseAddr("10.0.0.11")}
	if got := b.Status(); got != want {
		t.Errorf("backup's status = %+v, want %+v", got, want)
	}
	if got := a.Status(); got.State != Master || got.Master.IsValid() || got.BecameMaster != 1 {
		t.Errorf("master's status = %+v, want master, no other master, 1 takeover", got)
	}
	if err := a.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "b master", func() bool { return b.State() == Master })
	if got := b.Status(); got.Master.IsValid() || got.BecameMaster != 1 {
		t.Errorf("new master's status = %+v, want no other master, 1 takeover", got)
	}
}
