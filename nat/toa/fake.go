package toa

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"sync"
)

// FakeDirector keeps the director's side in memory for agent tests. It
// checks its input as KernelDirector does; FailNext makes the next call
// fail.
type FakeDirector struct {
	fakeFailure // its mu guards all following fields
	ifaces      []string
	services    []netip.AddrPort
	stats       DirectorStats
	removed     bool
	pinned      bool
	calls       []string
	outdated    []string // interfaces with another build's program
}

var _ Director = (*FakeDirector)(nil)

// NewFakeDirector returns a FakeDirector on no interface with no services.
func NewFakeDirector() *FakeDirector { return &FakeDirector{} }

// Attach implements Director.
func (f *FakeDirector) Attach(ctx context.Context, iface string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.fail(); err != nil {
		return err
	}
	f.calls = append(f.calls, "attach "+iface)
	if !slices.Contains(f.ifaces, iface) {
		f.ifaces = append(f.ifaces, iface)
	}
	f.outdated = slices.DeleteFunc(f.outdated, func(s string) bool { return s == iface })
	f.removed, f.pinned = false, true
	return nil
}

// Detach implements Director.
func (f *FakeDirector) Detach(ctx context.Context, iface string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.fail(); err != nil {
		return err
	}
	f.calls = append(f.calls, "detach "+iface)
	f.ifaces = slices.DeleteFunc(f.ifaces, func(s string) bool { return s == iface })
	f.outdated = slices.DeleteFunc(f.outdated, func(s string) bool { return s == iface })
	return nil
}

// SetServices implements Director.
func (f *FakeDirector) SetServices(ctx context.Context, vips []netip.AddrPort) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.fail(); err != nil {
		return err
	}
	keys, err := vipKeys(vips)
	if err != nil {
		return err
	}
	f.calls = append(f.calls, fmt.Sprintf("services %d", len(keys)))
	f.services = f.services[:0]
	for _, k := range keys {
		f.services = append(f.services, k.addrPort())
	}
	f.removed, f.pinned = false, true
	return nil
}

// Attached implements Director.
func (f *FakeDirector) Attached(ctx context.Context) ([]string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.ifaces), f.fail()
}

// Outdated implements Director.
func (f *FakeDirector) Outdated(ctx context.Context) ([]string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.outdated), f.fail()
}

// SetOutdated makes the program on ifaces another build's, as a previous
// release leaves it, until Attach replaces it; the interfaces carry it.
func (f *FakeDirector) SetOutdated(ifaces ...string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.outdated = slices.Clone(ifaces)
	for _, iface := range ifaces {
		if !slices.Contains(f.ifaces, iface) {
			f.ifaces = append(f.ifaces, iface)
		}
	}
	f.pinned = true
}

// Services implements Director.
func (f *FakeDirector) Services(ctx context.Context) ([]netip.AddrPort, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.services), f.fail()
}

// Pinned implements Director.
func (f *FakeDirector) Pinned() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.pinned
}

// Calls returns the changes made so far, one a string ("attach eth0",
// "detach eth0", "services 2", "remove"), and forgets them.
func (f *FakeDirector) Calls() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	c := f.calls
	f.calls = nil
	return c
}

// Stats implements Director.
func (f *FakeDirector) Stats(ctx context.Context) (DirectorStats, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.stats, f.fail()
}

// SetStats sets what Stats returns.
func (f *FakeDirector) SetStats(s DirectorStats) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.stats = s
}

// Remove implements Director.
func (f *FakeDirector) Remove(ctx context.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.fail(); err != nil {
		return err
	}
	f.calls = append(f.calls, "remove")
	f.ifaces, f.services, f.stats, f.removed, f.pinned, f.outdated = nil, nil, DirectorStats{}, true, false, nil
	return nil
}

// Close implements Director.
func (f *FakeDirector) Close() error { return nil }

// State returns the interfaces and services, in the order they were
// given, and whether Remove was the last change.
func (f *FakeDirector) State() (ifaces []string, services []netip.AddrPort, removed bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.ifaces), slices.Clone(f.services), f.removed
}

// FakeRealServer keeps the real server's side in memory for agent tests.
type FakeRealServer struct {
	fakeFailure // its mu guards all following fields
	cgroup      string
	services    []netip.AddrPort
	directors   []netip.Addr
	stats       RealServerStats
	removed     bool
	pinned      bool
}

var _ RealServer = (*FakeRealServer)(nil)

// NewFakeRealServer returns a FakeRealServer attached nowhere.
func NewFakeRealServer() *FakeRealServer { return &FakeRealServer{} }

// Attach implements RealServer.
func (f *FakeRealServer) Attach(ctx context.Context, cgroupPath string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.fail(); err != nil {
		return err
	}
	f.cgroup, f.removed, f.pinned = cgroupPath, false, true
	return nil
}

// SetServices implements RealServer.
func (f *FakeRealServer) SetServices(ctx context.Context, local []netip.AddrPort) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.fail(); err != nil {
		return err
	}
	keys, err := vipKeys(local)
	if err != nil {
		return err
	}
	f.services = f.services[:0]
	for _, k := range keys {
		f.services = append(f.services, k.addrPort())
	}
	f.pinned = true
	return nil
}

// SetDirectors implements RealServer.
func (f *FakeRealServer) SetDirectors(ctx context.Context, addrs []netip.Addr) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.fail(); err != nil {
		return err
	}
	keys, err := addrKeys(addrs)
	if err != nil {
		return err
	}
	f.directors = f.directors[:0]
	for _, k := range keys {
		f.directors = append(f.directors, netip.AddrFrom16(k.Addr).Unmap())
	}
	f.pinned = true
	return nil
}

// Stats implements RealServer.
func (f *FakeRealServer) Stats(ctx context.Context) (RealServerStats, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.stats, f.fail()
}

// SetStats sets what Stats returns.
func (f *FakeRealServer) SetStats(s RealServerStats) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.stats = s
}

// Remove implements RealServer.
func (f *FakeRealServer) Remove(ctx context.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.fail(); err != nil {
		return err
	}
	f.cgroup, f.services, f.directors, f.stats, f.removed, f.pinned = "", nil, nil, RealServerStats{}, true, false
	return nil
}

// Pinned implements RealServer.
func (f *FakeRealServer) Pinned() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.pinned
}

// Close implements RealServer.
func (f *FakeRealServer) Close() error { return nil }

// State returns the cgroup, the services and the directors, and whether
// Remove was the last change.
func (f *FakeRealServer) State() (cgroup string, services []netip.AddrPort, directors []netip.Addr, removed bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.cgroup, slices.Clone(f.services), slices.Clone(f.directors), f.removed
}

// fakeFailure is the fakes' lock and the failure FailNext arms.
type fakeFailure struct {
	mu       sync.Mutex
	failNext error
}

// FailNext makes the next call return err.
func (f *fakeFailure) FailNext(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.failNext = err
}

// fail returns the armed failure and disarms it; the caller holds mu.
func (f *fakeFailure) fail() error {
	err := f.failNext
	f.failNext = nil
	return err
}
