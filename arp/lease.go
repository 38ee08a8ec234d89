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

// Leased is the Addresses of a clustered director: every address it adds
// gets a kernel lifetime that Run renews while this process runs (and Keep
// allows), so the VIPs of a killed agent vanish by themselves after at most
// Lifetime; every add is followed by a burst of announcements; and OnChange
// hears of every add and removal, so the cluster can claim a VIP until its
// address is really gone. Add, Delete and the renewal are serialized, so a
// renewal never brings back an address just deleted.
type Leased struct {
	Addrs     ExpiringAddresses
	Announcer Announcer // nil: no announcements
	Lifetime  time.Duration
	Burst     []time.Duration // nil: DefaultBurst
	// OnChange is called after an address was added (true) or removed.
	OnChange func(addr netip.Addr, present bool)
	// Keep says whether addresses may be renewed now; nil always.
	Keep func() bool
	Log  *slog.Logger

	mu     sync.Mutex // guards all following fields
	leases map[lease]uint64
	gen    uint64
	paused bool
}

type lease struct {
	dev string
	p   netip.Prefix
}

var _ Addresses = (*Leased)(nil)

// List implements Addresses.
func (l *Leased) List(ctx context.Context, dev string) ([]netip.Prefix, error) {
	return l.Addrs.List(ctx, dev)
}

// Add implements Addresses: the address is added with a lifetime and
// announced.
func (l *Leased) Add(ctx context.Context, dev string, p netip.Prefix) error {
	l.mu.Lock()
	if err := l.Addrs.AddExpiring(ctx, dev, p, l.Lifetime); err != nil {
		l.mu.Unlock()
		return err
	}
	if l.leases == nil {
		l.leases = map[lease]uint64{}
	}
	l.gen++
	k, gen := lease{dev, p}, l.gen
	l.leases[k] = gen
	l.mu.Unlock()
	l.changed(p.Addr(), true)
	// The first announcement right here, the takeover's critical path; the
	// repeats in the background.
	now := time.Now()
	l.burst(k, gen, now, l.offsets()[:1])
	go l.burst(k, gen, now, l.offsets()[1:])
	return nil
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
	err := l.Addrs.Delete(ctx, dev, p)
	gone := err == nil || errors.Is(err, ErrNotFound)
	if gone {
		delete(l.leases, lease{dev, p})
	}
	l.mu.Unlock()
	if gone {
		l.changed(p.Addr(), false)
	}
	return err
}

func (l *Leased) changed(a netip.Addr, present bool) {
	if l.OnChange != nil {
		l.OnChange(a, present)
	}
}

func (l *Leased) log() *slog.Logger {
	if l.Log == nil {
		return slog.Default()
	}
	return l.Log
}

// Run renews the leased addresses four times per lifetime until ctx ends.
func (l *Leased) Run(ctx context.Context) {
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
		if err := l.Addrs.AddExpiring(ctx, k.dev, k.p, l.Lifetime); err != nil {
			l.log().Error("renewing a VIP address", "address", k.p.String(), "interface", k.dev, "err", err)
		}
	}
}

// ReleaseAll deletes every leased address (a director leaving the
// cluster hands its VIPs over).
func (l *Leased) ReleaseAll(ctx context.Context) error {
	l.mu.Lock()
	var errs []error
	var gone []netip.Addr
	for k := range l.leases {
		err := l.Addrs.Delete(ctx, k.dev, k.p)
		if err != nil && !errors.Is(err, ErrNotFound) {
			errs = append(errs, err)
			continue
		}
		delete(l.leases, k)
		gone = append(gone, k.p.Addr())
		l.log().Info("released VIP address", "address", k.p.String(), "interface", k.dev)
	}
	l.mu.Unlock()
	for _, a := range gone {
		l.changed(a, false)
	}
	return errors.Join(errs...)
}

// RemoveStale deletes addresses of addrs on dev that have a finite
// lifetime but no lease here: what a killed predecessor left. A starting
// director holds nothing until the cluster says so.
func (l *Leased) RemoveStale(ctx context.Context, dev string, addrs []netip.Addr) error {
	found, err := l.Addrs.ListExpiring(ctx, dev)
	if err != nil {
		return err
	}
	want := map[netip.Addr]bool{}
	for _, a := range addrs {
		want[a.Unmap()] = true
	}
	var errs []error
	for _, p := range found {
		l.mu.Lock()
		_, leased := l.leases[lease{dev, p}]
		l.mu.Unlock()
		if leased || !want[p.Addr()] {
			continue
		}
		if err := l.Delete(ctx, dev, p); err != nil && !errors.Is(err, ErrNotFound) {
			errs = append(errs, err)
			continue
		}
		l.log().Info("removed a VIP address left by a previous run", "address", p.String(), "interface", dev)
	}
	return errors.Join(errs...)
}

// Reannounce announces addr again on every interface it is leased on.
func (l *Leased) Reannounce(addr netip.Addr) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for k, gen := range l.leases {
		if k.p.Addr() == addr {
			go l.burst(k, gen, time.Now(), l.offsets())
		}
	}
}

// burst announces k at each of offsets from start while it is still the
// same lease.
func (l *Leased) burst(k lease, gen uint64, start time.Time, offsets []time.Duration) {
	if l.Announcer == nil {
		return
	}
	for _, off := range offsets {
		time.Sleep(time.Until(start.Add(off)))
		l.mu.Lock()
		current := l.leases[k] == gen
		l.mu.Unlock()
		if !current {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		err := l.Announcer.Announce(ctx, k.dev, k.p.Addr())
		cancel()
		switch {
		case err != nil:
			l.log().Warn("announcing a VIP address", "address", k.p.Addr().String(), "interface", k.dev, "err", err)
		case off == 0:
			l.log().Info("announced VIP address", "address", k.p.Addr().String(), "interface", k.dev)
		}
	}
}
