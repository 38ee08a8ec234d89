package arp

import (
	"context"
	"errors"
	"log/slog"
	"net/netip"
	"sync"
	"time"
)

// DefaultBurst is when a new address is announced, counted from the add:
// at once for the takeover, then repeated for links that lost a packet or
// switches that learned late (keepalived repeats its gratuitous ARPs too).
var DefaultBurst = []time.Duration{0, 100 * time.Millisecond, 500 * time.Millisecond, time.Second, 2 * time.Second, 5 * time.Second}

// Leased is the Addresses and the Announcer of a clustered director: every
// address it adds gets a kernel lifetime that Run renews while this process
// runs (and Keep allows), so the VIPs of a killed agent vanish by themselves
// after at most Lifetime; an announcement is a burst that goes on while the
// address stays. Add, Delete and the renewal are serialized, so a renewal
// never brings back an address just deleted.
//
// The repeats of a burst run on goroutines of Run's: started there (those
// asked for before Run are started when it starts), stopped when its ctx
// ends, and waited for before it returns. Once Run has returned nothing
// repeats: Announce sends its first announcement only, Reannounce none.
type Leased struct {
	Addrs     ExpiringAddresses
	Announcer Announcer // sends one announcement; nil: Announce does nothing
	Lifetime  time.Duration
	Burst     []time.Duration // nil: DefaultBurst
	// Keep says whether addresses may be renewed now; nil always.
	Keep func() bool
	Log  *slog.Logger

	mu        sync.Mutex // guards all following fields
	holdUntil time.Time  // a restart hold: addresses stay valid until then (HoldUntil)
	leases    map[lease]uint64
	gen       uint64
	paused    bool
	runCtx    context.Context // Run's; nil until it starts
	ended     bool            // Run has stopped: no more bursts
	pending   []burst         // asked for before Run started
	bursts    sync.WaitGroup  // the bursts running; Add only under mu while !ended
}

// burst is the repeated announcement of a lease: at each of offsets from
// start, while it is still the same lease (gen).
type burst struct {
	k       lease
	gen     uint64
	start   time.Time
	offsets []time.Duration
}

type lease struct {
	dev string
	p   netip.Prefix
}

var (
	_ Addresses = (*Leased)(nil)
	_ Announcer = (*Leased)(nil)
)

// List implements Addresses.
func (l *Leased) List(ctx context.Context, dev string) ([]netip.Prefix, error) {
	return l.Addrs.List(ctx, dev)
}

// Add implements Addresses: the address is added with a lifetime.
func (l *Leased) Add(ctx context.Context, dev string, p netip.Prefix) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.Addrs.AddExpiring(ctx, dev, p, l.lifetime(time.Now())); err != nil {
		return err
	}
	l.lease(dev, p)
	return nil
}

// lease records p on dev as leased; l.mu is held.
func (l *Leased) lease(dev string, p netip.Prefix) {
	if l.leases == nil {
		l.leases = map[lease]uint64{}
	}
	l.gen++
	l.leases[lease{dev, p}] = l.gen
}

// Adopt takes over p on dev, put there with a lifetime by the previous
// process of this director under a restart hold: renewed from now on like
// an address Add put there, without touching it now.
func (l *Leased) Adopt(dev string, p netip.Prefix) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lease(dev, p)
}

// HoldUntil keeps every leased address valid until at least t, from now
// on and at every renewal: a restart hold, during which no process renews
// them. The zero t ends a hold (the next renewal gives Lifetime again).
func (l *Leased) HoldUntil(ctx context.Context, t time.Time) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.holdUntil = t
	var errs []error
	for k := range l.leases {
		errs = append(errs, l.Addrs.AddExpiring(ctx, k.dev, k.p, l.lifetime(time.Now())))
	}
	return errors.Join(errs...)
}

// lifetime is the lifetime an address gets at now: Lifetime, or up to the
// end of a restart hold if that is later; l.mu is held.
func (l *Leased) lifetime(now time.Time) time.Duration {
	return max(l.Lifetime, l.holdUntil.Sub(now))
}

// Announce implements Announcer for a leased address: the first
// announcement at once, the takeover's critical path, and the repeats of the
// burst in the background while the address stays leased.
func (l *Leased) Announce(ctx context.Context, dev string, addr netip.Addr) error {
	l.mu.Lock()
	var k lease
	var gen uint64
	for c, g := range l.leases {
		if c.dev == dev && c.p.Addr() == addr {
			k, gen = c, g
		}
	}
	l.mu.Unlock()
	if gen == 0 || l.Announcer == nil {
		return nil
	}
	now := time.Now()
	if err := l.announce(ctx, k); err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.startBurst(burst{k, gen, now, l.offsets()[1:]})
	return nil
}

// startBurst runs b on Run's goroutines, or keeps it for Run to start;
// l.mu is held.
func (l *Leased) startBurst(b burst) {
	switch {
	case len(b.offsets) == 0 || l.Announcer == nil || l.ended:
	case l.runCtx == nil:
		l.pending = append(l.pending, b)
	default:
		ctx := l.runCtx
		l.bursts.Go(func() { l.burst(ctx, b) })
	}
}

func (l *Leased) offsets() []time.Duration {
	if l.Burst == nil {
		return DefaultBurst
	}
	return l.Burst
}

// Delete implements Addresses.
func (l *Leased) Delete(ctx context.Context, dev string, p netip.Prefix) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	err := l.Addrs.Delete(ctx, dev, p)
	if err == nil || errors.Is(err, ErrNotFound) {
		delete(l.leases, lease{dev, p})
	}
	return err
}

func (l *Leased) log() *slog.Logger {
	if l.Log == nil {
		return slog.Default()
	}
	return l.Log
}

// Run renews the leased addresses four times per lifetime and runs the
// announcement bursts until ctx ends, then waits for the bursts to stop.
// Call it once.
func (l *Leased) Run(ctx context.Context) {
	l.mu.Lock()
	l.runCtx = ctx
	for _, b := range l.pending {
		l.startBurst(b)
	}
	l.pending = nil
	l.mu.Unlock()
	defer func() {
		l.mu.Lock()
		l.ended = true // after this no burst starts: Wait sees every one
		l.mu.Unlock()
		l.bursts.Wait()
	}()
	t := time.NewTicker(max(l.Lifetime/4, 250*time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			l.renew(ctx)
		}
	}
}

func (l *Leased) renew(ctx context.Context) {
	keep := l.Keep == nil || l.Keep()
	l.mu.Lock()
	defer l.mu.Unlock()
	if keep == l.paused {
		l.paused = !keep
		if !keep && len(l.leases) > 0 {
			l.log().Warn("not renewing VIP addresses: the cluster node is not running; they expire", "lifetime", l.Lifetime.String())
		}
	}
	if !keep {
		return
	}
	for k := range l.leases {
		if err := l.Addrs.AddExpiring(ctx, k.dev, k.p, l.lifetime(time.Now())); err != nil {
			l.log().Error("renewing a VIP address", "address", k.p.String(), "interface", k.dev, "err", err)
		}
	}
}

// Reannounce announces addr again on every interface it is leased on.
func (l *Leased) Reannounce(addr netip.Addr) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for k, gen := range l.leases {
		if k.p.Addr() == addr {
			l.startBurst(burst{k, gen, time.Now(), l.offsets()})
		}
	}
}

// burst announces b's lease at each of its offsets while it is still the
// same lease, until ctx ends.
func (l *Leased) burst(ctx context.Context, b burst) {
	for _, off := range b.offsets {
		t := time.NewTimer(time.Until(b.start.Add(off)))
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		l.mu.Lock()
		current := l.leases[b.k] == b.gen
		l.mu.Unlock()
		if !current {
			return
		}
		actx, cancel := context.WithTimeout(ctx, 2*time.Second)
		if err := l.announce(actx, b.k); err != nil {
			l.log().Warn("announcing a VIP address", "address", b.k.p.Addr().String(), "interface", b.k.dev, "err", err)
		}
		cancel()
	}
}

func (l *Leased) announce(ctx context.Context, k lease) error {
	return l.Announcer.Announce(ctx, k.dev, k.p.Addr())
}
