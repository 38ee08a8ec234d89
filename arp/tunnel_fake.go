package arp

import (
	"context"
	"fmt"
	"slices"
	"sync"
)

// FakeTunnels keeps tunnel devices and GUE ports in memory. Creating a
// kind's fallback device behaves as loading its module does: the device
// appears (down) and CreateLink reports it was not created.
type FakeTunnels struct {
	mu    sync.Mutex // guards all following fields
	links map[string]Link
	fou   []FouPort
	ops   []string
}

var _ Tunnels = (*FakeTunnels)(nil)

// NewFakeTunnels returns a Fake holding the given devices.
func NewFakeTunnels(links ...Link) *FakeTunnels {
	f := &FakeTunnels{links: map[string]Link{}}
	for _, l := range links {
		f.links[l.Name] = l
	}
	return f
}

// Ops returns the mutating calls made so far and forgets them.
func (f *FakeTunnels) Ops() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	ops := f.ops
	f.ops = nil
	return ops
}

// Link implements Tunnels.
func (f *FakeTunnels) Link(ctx context.Context, dev string) (Link, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	l, ok := f.links[dev]
	if !ok {
		return Link{}, fmt.Errorf("interface %q: %w", dev, ErrNotFound)
	}
	return l, nil
}

// CreateLink implements Tunnels.
func (f *FakeTunnels) CreateLink(ctx context.Context, dev, kind string) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := FallbackDevice[kind]; !ok {
		return false, fmt.Errorf("creating %s: unknown tunnel kind %q", dev, kind)
	}
	f.ops = append(f.ops, "create-link "+dev+" "+kind)
	if _, ok := f.links[dev]; ok {
		return false, nil
	}
	f.links[dev] = Link{Name: dev, Kind: kind}
	return FallbackDevice[kind] != dev, nil
}

// SetUp implements Tunnels.
func (f *FakeTunnels) SetUp(ctx context.Context, dev string, up bool) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	l, ok := f.links[dev]
	if !ok {
		return fmt.Errorf("interface %q: %w", dev, ErrNotFound)
	}
	l.Up = up
	f.links[dev] = l
	f.ops = append(f.ops, fmt.Sprintf("set-link %s up=%v", dev, up))
	return nil
}

// DeleteLink implements Tunnels.
func (f *FakeTunnels) DeleteLink(ctx context.Context, dev string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.links[dev]; !ok {
		return fmt.Errorf("interface %q: %w", dev, ErrNotFound)
	}
	delete(f.links, dev)
	f.ops = append(f.ops, "delete-link "+dev)
	return nil
}

// FouPorts implements Tunnels.
func (f *FakeTunnels) FouPorts(ctx context.Context) ([]FouPort, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.fou), nil
}

// AddFouPort implements Tunnels.
func (f *FakeTunnels) AddFouPort(ctx context.Context, p FouPort) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if slices.Contains(f.fou, p) {
		return fmt.Errorf("opening %s: %w", p, ErrExists)
	}
	f.fou = append(f.fou, p)
	f.ops = append(f.ops, "add-fou "+p.String())
	return nil
}

// DeleteFouPort implements Tunnels.
func (f *FakeTunnels) DeleteFouPort(ctx context.Context, p FouPort) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	i := slices.Index(f.fou, p)
	if i < 0 {
		return fmt.Errorf("closing %s: %w", p, ErrNotFound)
	}
	f.fou = slices.Delete(f.fou, i, i+1)
	f.ops = append(f.ops, "delete-fou "+p.String())
	return nil
}
