package vrrp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Packet is a VRRP packet as received: the IP header's source, destination
// and TTL (hop limit) and the VRRP message.
type Packet struct {
	Src, Dst netip.Addr
	TTL      int
	Data     []byte
}

// Conn sends and receives the advertisements of one address family on one
// link (ListenV4; a fake in tests).
type Conn interface {
	// Primary is this router's address on the link, the source of its
	// advertisements.
	Primary() netip.Addr
	// Send sends a VRRP message to the family's multicast group.
	Send(b []byte) error
	// Read blocks until a packet arrives; an error ends the reading
	// (ErrClosed after Close).
	Read() (Packet, error)
	Close() error
}

// ErrClosed is what Read returns once the Conn is closed.
var ErrClosed = errors.New("vrrp: connection closed")

// Config is one virtual router.
type Config struct {
	VRID     uint8
	Priority uint8  // 1-254
	Interval uint16 // centiseconds
	Preempt  bool
	Log      *slog.Logger
	// Now is the clock (time.Now when nil).
	Now func() time.Time
}

// inbox bounds the packets waiting for the router's goroutine: a flood is
// dropped at the socket, not queued.
const inbox = 64

// Router runs the state machine of one virtual router on its own goroutine
// and tells the agent which VIPs it holds: all it serves while master.
// Its methods are safe for concurrent use.
type Router struct {
	cfg  Config
	conn Conn
	log  *slog.Logger
	now  func() time.Time

	changed chan struct{} // Changed: cap 1, a pending value is enough
	wake    chan struct{} // Serve and Stop poke the goroutine
	done    chan struct{}
	stopped chan struct{} // closed by Stop to ask for the shutdown

	mu     sync.Mutex
	served []netip.Addr // last given to Serve, of the conn's family, sorted

	view         atomic.Pointer[view]
	running      atomic.Bool
	drops        sync.Map // reason (string) → *atomic.Uint64
	becameMaster atomic.Uint64
}

// view is what Holds answers from, and the master as last heard for the
// status.
type view struct {
	state  State
	vips   map[netip.Addr]bool
	master netip.Addr
}

// Start runs a router over conn until ctx ends or Stop.
func Start(ctx context.Context, cfg Config, conn Conn) (*Router, error) {
	if cfg.Priority == 0 || cfg.Priority == 255 {
		return nil, fmt.Errorf("vrrp: priority %d: want 1-254 (255, the address owner, is not supported)", cfg.Priority)
	}
	if cfg.Interval == 0 || cfg.Interval > maxInterval {
		return nil, fmt.Errorf("vrrp: advertisement interval %d cs: want 1-%d", cfg.Interval, maxInterval)
	}
	if !conn.Primary().IsValid() {
		return nil, errors.New("vrrp: no primary address on the link")
	}
	r := &Router{cfg: cfg, conn: conn, log: cfg.Log, now: cfg.Now,
		changed: make(chan struct{}, 1), wake: make(chan struct{}, 1),
		done: make(chan struct{}), stopped: make(chan struct{})}
	if r.log == nil {
		r.log = slog.New(slog.DiscardHandler)
	}
	if r.now == nil {
		r.now = time.Now
	}
	r.view.Store(&view{})
	r.running.Store(true)
	pkts := make(chan Packet, inbox)
	go r.read(pkts)
	go r.run(ctx, pkts)
	return r, nil
}

// read hands packets to the goroutine until the conn is closed.
func (r *Router) read(pkts chan<- Packet) {
	defer close(pkts)
	for {
		p, err := r.conn.Read()
		if errors.Is(err, ErrClosed) {
			return
		}
		if err != nil {
			// One reason whatever the error says: the reasons are a
			// bounded set of counters.
			r.drop("unreadable packet", netip.Addr{})
			r.log.Debug("VRRP: unreadable packet", "vrid", r.cfg.VRID, "err", err)
			continue
		}
		select {
		case pkts <- p:
		default:
			r.drop("receive queue full", p.Src)
		}
	}
}

func (r *Router) run(ctx context.Context, pkts <-chan Packet) {
	defer close(r.done)
	defer r.running.Store(false)
	m := NewMachine(Params{VRID: r.cfg.VRID, Priority: r.cfg.Priority, Interval: r.cfg.Interval,
		Preempt: r.cfg.Preempt, Primary: r.conn.Primary()})
	var addrs []netip.Addr // advertised: the last served list that was not empty
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	send := func(a *Advert) {
		if a == nil || len(addrs) == 0 {
			return
		}
		a.Addresses = addrs
		if err := r.sendAdvert(*a); err != nil {
			r.log.Error("sending a VRRP advertisement", "vrid", r.cfg.VRID, "err", err)
		}
	}
	shutdown := func(why string) {
		if m.State() != Initialize {
			r.log.Info("VRRP router stops", "vrid", r.cfg.VRID, "state", m.State().String(), "why", why)
		}
		send(m.Shutdown())
		r.publish(m, addrs)
	}
	defer r.conn.Close()
	for {
		if d := m.Deadline(); !d.IsZero() {
			timer.Reset(max(d.Sub(r.now()), 0))
		} else {
			timer.Stop()
		}
		select {
		case <-ctx.Done():
			shutdown("context ended")
			return
		case <-r.stopped:
			shutdown("stopped")
			return
		case <-r.wake:
			served := r.servedNow()
			switch {
			case len(served) > 0:
				addrs = served
				if m.State() == Initialize {
					m.Start(r.now())
					r.log.Info("VRRP router starts as backup", "vrid", r.cfg.VRID, "priority", r.cfg.Priority,
						"advert_int", cs(r.cfg.Interval).String(), "vips", len(addrs), "master_down", m.MasterDownInterval().String())
				}
			case m.State() != Initialize:
				shutdown("no VIP to serve")
			}
		case <-timer.C:
			send(m.Tick(r.now()))
		case p, ok := <-pkts:
			if !ok {
				shutdown("the socket failed")
				return
			}
			send(r.receive(m, p, addrs))
		}
		r.publish(m, addrs)
	}
}

// receive validates p and hands it to m.
func (r *Router) receive(m *Machine, p Packet, addrs []netip.Addr) *Advert {
	if p.Src == r.conn.Primary() {
		return nil // our own, looped back
	}
	a, err := Parse(p.Data, p.Src, p.Dst, p.TTL)
	if err == nil && a.VRID != r.cfg.VRID {
		err = ErrVRID
	}
	if err != nil {
		r.drop(err.Error(), p.Src)
		return nil
	}
	if a.Priority == 255 {
		r.log.Warn("VRRP: an address owner (priority 255) is on the link: it always wins", "vrid", a.VRID, "from", p.Src)
	}
	if m.State() == Backup && a.Priority != 0 && !slices.Equal(sorted(a.Addresses), addrs) {
		r.dropOnce("the master advertises other addresses than this director's VIPs", p.Src,
			"theirs", fmt.Sprint(a.Addresses), "ours", fmt.Sprint(addrs))
	}
	return m.Receive(r.now(), p.Src, a)
}

func (r *Router) sendAdvert(a Advert) error {
	src := r.conn.Primary()
	dst := GroupV4
	if src.Is6() {
		dst = GroupV6
	}
	b, err := a.Marshal(src, dst)
	if err != nil {
		return err
	}
	return r.conn.Send(b)
}

// publish makes Holds answer from m's state, telling Changed when the
// answer may differ.
func (r *Router) publish(m *Machine, addrs []netip.Addr) {
	old := r.view.Load()
	st := m.State()
	if st == old.state && (st != Master || len(old.vips) == len(addrs) && allIn(addrs, old.vips)) {
		// Holds answers as before: only the status may learn of
		// another master, and Changed stays quiet.
		if m.Master() != old.master {
			r.view.Store(&view{state: old.state, vips: old.vips, master: m.Master()})
		}
		return
	}
	v := &view{state: st, vips: map[netip.Addr]bool{}, master: m.Master()}
	for _, a := range addrs {
		v.vips[a] = true
	}
	r.view.Store(v)
	if st == Master && old.state != Master {
		r.becameMaster.Add(1)
	}
	if st != old.state {
		kv := []any{"vrid", r.cfg.VRID, "from", old.state.String(), "to", st.String()}
		if m.Master().IsValid() {
			kv = append(kv, "master", m.Master().String())
		}
		r.log.Info("VRRP state changed", kv...)
	}
	select {
	case r.changed <- struct{}{}:
	default:
	}
}

func allIn(addrs []netip.Addr, set map[netip.Addr]bool) bool {
	for _, a := range addrs {
		if !set[a] {
			return false
		}
	}
	return true
}

func (r *Router) servedNow() []netip.Addr {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.served
}

// Serve sets the VIPs this router advertises and holds while master: those
// of its family.
func (r *Router) Serve(vips []netip.Addr) {
	is6 := r.conn.Primary().Is6()
	var mine []netip.Addr
	for _, v := range vips {
		if v.Is6() == is6 {
			mine = append(mine, v)
		}
	}
	mine = sorted(mine)
	if len(mine) > maxAddressesV {
		r.log.Warn("VRRP advertises at most 255 addresses: the others are not held", "vrid", r.cfg.VRID, "vips", len(mine))
		mine = mine[:maxAddressesV]
	}
	r.mu.Lock()
	changed := !slices.Equal(mine, r.served)
	r.served = mine
	r.mu.Unlock()
	if changed {
		select {
		case r.wake <- struct{}{}:
		default:
		}
	}
}

func sorted(a []netip.Addr) []netip.Addr {
	s := slices.Clone(a)
	slices.SortFunc(s, netip.Addr.Compare)
	return slices.Compact(s)
}

// ServeHomes is for FULLNAT under ECMP only, which VRRP does not run.
func (r *Router) ServeHomes(map[netip.Addr]string) {}

// Holds reports whether this router is master and vip one of its VIPs.
func (r *Router) Holds(vip netip.Addr) bool {
	v := r.view.Load()
	return v.state == Master && v.vips[vip]
}

// AddressChanged needs no answer: the master holds its VIPs whether or not
// their addresses are in place yet.
func (r *Router) AddressChanged(netip.Addr, bool) {}

// Changed delivers a value whenever Holds may answer differently.
func (r *Router) Changed() <-chan struct{} { return r.changed }

// State is the router's current state.
func (r *Router) State() State { return r.view.Load().state }

// Status is what the director's status shows of a router.
type Status struct {
	VRID     uint8
	Priority uint8
	Interval uint16 // configured, in centiseconds
	IPv6     bool
	State    State
	// Master is the master this backup last heard from; invalid while
	// this router is master or has heard none.
	Master netip.Addr
	// BecameMaster counts the times this router became master.
	BecameMaster uint64
}

// Status reports the router's configuration and state now.
func (r *Router) Status() Status {
	v := r.view.Load()
	return Status{VRID: r.cfg.VRID, Priority: r.cfg.Priority, Interval: r.cfg.Interval, IPv6: r.conn.Primary().Is6(),
		State: v.state, Master: v.master, BecameMaster: r.becameMaster.Load()}
}

// Healthy reports whether the router runs: the VIP addresses' leases are
// renewed only while it does.
func (r *Router) Healthy() bool { return r.running.Load() }

// Stop shuts the router down: a master sends an advertisement with
// priority 0, so that a backup takes over after its Skew_Time instead of
// a whole Master_Down_Interval. It returns once the router has stopped or
// ctx ends.
func (r *Router) Stop(ctx context.Context) error {
	select {
	case <-r.stopped:
	default:
		close(r.stopped)
	}
	select {
	case <-r.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Drops counts the packets dropped, by reason.
func (r *Router) Drops() map[string]uint64 {
	out := map[string]uint64{}
	r.drops.Range(func(k, v any) bool {
		out[k.(string)] = v.(*atomic.Uint64).Load()
		return true
	})
	return out
}

// drop counts a dropped packet; the first of each reason is logged (a
// packet of another virtual router on the link is normal and only
// counted).
func (r *Router) drop(reason string, from netip.Addr) {
	c, loaded := r.drops.LoadOrStore(reason, new(atomic.Uint64))
	c.(*atomic.Uint64).Add(1)
	if !loaded && reason != ErrVRID.Error() {
		r.log.Warn("dropping VRRP packets (logged once per reason)", "vrid", r.cfg.VRID, "reason", reason, "from", from.String())
	}
}

// dropOnce logs a remarkable packet once, counted like a drop though it is
// not dropped.
func (r *Router) dropOnce(reason string, from netip.Addr, kv ...any) {
	c, loaded := r.drops.LoadOrStore(reason, new(atomic.Uint64))
	c.(*atomic.Uint64).Add(1)
	if !loaded {
		r.log.Warn("VRRP: "+reason+" (logged once)", append([]any{"vrid", r.cfg.VRID, "from", from.String()}, kv...)...)
	}
}
