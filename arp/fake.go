package arp

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"sync"
)

// Fake keeps interface addresses in memory. Interfaces exist once created
// with AddInterface.
type Fake struct {
	mu    sync.Mutex // guards all following fields
	addrs map[string][]netip.Prefix
	ops   []string
}

var _ Addresses = (*Fake)(nil)

// NewFake returns a Fake with the named interfaces and no addresses.
func NewFake(devs ...string) *Fake {
	f := &Fake{addrs: map[string][]netip.Prefix{}}
	for _, d := range devs {
		f.addrs[d] = nil
	}
	return f
}

// Ops returns the mutating calls made so far and forgets them.
func (f *Fake) Ops() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	ops := f.ops
	f.ops = nil
	return ops
}

// List implements Addresses.
func (f *Fake) List(ctx context.Context, dev string) ([]netip.Prefix, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	a, ok := f.addrs[dev]
	if !ok {
		return nil, fmt.Errorf("interface %q: %w", dev, ErrNotFound)
	}
	return slices.Clone(a), nil
}

// Add implements Addresses.
func (f *Fake) Add(ctx context.Context, dev string, p netip.Prefix) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	a, ok := f.addrs[dev]
	if !ok {
		return fmt.Errorf("interface %q: %w", dev, ErrNotFound)
	}
	f.ops = append(f.ops, fmt.Sprintf("add-address %s %s", dev, p))
	if !slices.Contains(a, p) {
		f.addrs[dev] = append(a, p)
	}
	return nil
}

// Delete implements Addresses.
func (f *Fake) Delete(ctx context.Context, dev string, p netip.Prefix) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	a, ok := f.addrs[dev]
	if !ok {
		return fmt.Errorf("interface %q: %w", dev, ErrNotFound)
	}
	i := slices.Index(a, p)
	if i < 0 {
		return fmt.Errorf("deleting %s from %q: %w", p, dev, ErrNotFound)
	}
	f.addrs[dev] = slices.Delete(a, i, i+1)
	f.ops = append(f.ops, fmt.Sprintf("delete-address %s %s", dev, p))
	return nil
}
