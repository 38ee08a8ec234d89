package arp

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"time"
)

// ExpiringAddresses are Addresses that can also be added with a lifetime,
// after which the kernel removes them by itself unless they were renewed:
// a VIP added so cannot outlive a killed agent by more than the lifetime.
type ExpiringAddresses interface {
	Addresses
	// AddExpiring puts p on dev, or renews it, valid for lifetime from now
	// (whole seconds, rounded up).
	AddExpiring(ctx context.Context, dev string, p netip.Prefix, lifetime time.Duration) error
	// ListExpiring returns the addresses on dev that have a finite
	// lifetime, which lvsd's cluster mode adds and a normal address lacks.
	ListExpiring(ctx context.Context, dev string) ([]netip.Prefix, error)
}

// lifetimeSeconds rounds up to the kernel's granularity (at least 1 s).
func lifetimeSeconds(d time.Duration) int {
	return max(1, int((d+time.Second-1)/time.Second))
}

// FakeExpiring is a Fake that also keeps lifetimes. Nothing expires by
// itself: Expire removes what has expired by a given time, as the kernel
// would have.
type FakeExpiring struct {
	*Fake
	mu      sync.Mutex // guards expires
	expires map[string]map[netip.Prefix]time.Time
	// Now is the clock lifetimes start from (default time.Now).
	Now func() time.Time
}

var _ ExpiringAddresses = (*FakeExpiring)(nil)

// NewFakeExpiring returns a FakeExpiring with the named interfaces.
func NewFakeExpiring(devs ...string) *FakeExpiring {
	return &FakeExpiring{Fake: NewFake(devs...), expires: map[string]map[netip.Prefix]time.Time{}, Now: time.Now}
}

// AddExpiring implements ExpiringAddresses. Its op reads
// "add-address DEV PREFIX valid Ns".
func (f *FakeExpiring) AddExpiring(ctx context.Context, dev string, p netip.Prefix, lifetime time.Duration) error {
	secs := lifetimeSeconds(lifetime)
	f.Fake.mu.Lock()
	a, ok := f.Fake.addrs[dev]
	if !ok {
		f.Fake.mu.Unlock()
		return fmt.Errorf("interface %q: %w", dev, ErrNotFound)
	}
	f.Fake.ops = append(f.Fake.ops, fmt.Sprintf("add-address %s %s valid %ds", dev, p, secs))
	if !slices.Contains(a, p) {
		f.Fake.addrs[dev] = append(a, p)
	}
	f.Fake.mu.Unlock()
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.expires[dev] == nil {
		f.expires[dev] = map[netip.Prefix]time.Time{}
	}
	f.expires[dev][p] = f.Now().Add(time.Duration(secs) * time.Second)
	return nil
}

// Add implements Addresses: a permanent address.
func (f *FakeExpiring) Add(ctx context.Context, dev string, p netip.Prefix) error {
	f.forget(dev, p)
	return f.Fake.Add(ctx, dev, p)
}

// Delete implements Addresses.
func (f *FakeExpiring) Delete(ctx context.Context, dev string, p netip.Prefix) error {
	f.forget(dev, p)
	return f.Fake.Delete(ctx, dev, p)
}

func (f *FakeExpiring) forget(dev string, p netip.Prefix) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.expires[dev], p)
}

// ListExpiring implements ExpiringAddresses.
func (f *FakeExpiring) ListExpiring(ctx context.Context, dev string) ([]netip.Prefix, error) {
	all, err := f.Fake.List(ctx, dev)
	if err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.DeleteFunc(all, func(p netip.Prefix) bool { _, ok := f.expires[dev][p]; return !ok }), nil
}

// ExpiresAt returns when p on dev expires; false for a permanent or
// missing address.
func (f *FakeExpiring) ExpiresAt(dev string, p netip.Prefix) (time.Time, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	t, ok := f.expires[dev][p]
	return t, ok
}

// Expire removes every address whose lifetime ended by now.
func (f *FakeExpiring) Expire(now time.Time) {
	f.mu.Lock()
	var gone [][2]any
	for dev, m := range f.expires {
		for p, t := range m {
			if !now.Before(t) {
				gone = append(gone, [2]any{dev, p})
				delete(m, p)
			}
		}
	}
	f.mu.Unlock()
	for _, g := range gone {
		_ = f.Fake.Delete(context.Background(), g[0].(string), g[1].(netip.Prefix))
	}
}
