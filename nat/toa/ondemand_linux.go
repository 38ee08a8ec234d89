package toa

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"sync"

	"github.com/cilium/ebpf"
	"github.com/vishvananda/netlink"
)

// OnDemandDirector is a KernelDirector opened at the first change: a
// director without TOA services loads no program and needs no BPF file
// system. Reads look at the pinned maps and the interfaces' filters
// without loading anything, so a restarted lvsd whose services are as
// before leaves the previous lvsd's program running on its maps. Safe for
// concurrent use.
type OnDemandDirector struct {
	opts DirectorOptions
	mu   sync.Mutex // guards d
	d    *KernelDirector
}

var _ Director = (*OnDemandDirector)(nil)

// NewOnDemandDirector returns a director that opens with opts when needed.
func NewOnDemandDirector(opts DirectorOptions) *OnDemandDirector {
	return &OnDemandDirector{opts: opts}
}

// Pinned implements Director.
func (o *OnDemandDirector) Pinned() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.pinnedLocked()
}

func (o *OnDemandDirector) pinnedLocked() bool {
	_, err := os.Stat(filepath.Join(o.opts.pinRoot(), "director"))
	return err == nil
}

// open returns the KernelDirector, opened now if it was not (create: also
// when nothing is pinned). Opening adopts a previous lvsd's objects and
// puts this lvsd's program in place of its program on every interface
// where that is another build's (or runs on maps this build replaced): a
// filter replaced in place, without a moment unfiltered. The same program
// on the same maps stays.
func (o *OnDemandDirector) open(ctx context.Context, create bool) (*KernelDirector, error) {
	if o.d != nil || !create && !o.pinnedLocked() {
		return o.d, nil
	}
	d, err := OpenDirector(ctx, o.opts)
	if err != nil {
		return nil, err
	}
	ifaces, err := d.Outdated(ctx)
	if d.newMaps {
		ifaces, err = d.Attached(ctx)
	}
	for _, iface := range ifaces {
		err = errors.Join(err, d.Attach(ctx, iface))
	}
	if err != nil {
		d.Close()
		return nil, err
	}
	o.d = d
	return d, nil
}

func (o *OnDemandDirector) change(ctx context.Context, f func(*KernelDirector) error) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	d, err := o.open(ctx, true)
	if err != nil {
		return err
	}
	return f(d)
}

// Attach implements Director.
func (o *OnDemandDirector) Attach(ctx context.Context, iface string) error {
	return o.change(ctx, func(d *KernelDirector) error { return d.Attach(ctx, iface) })
}

// Detach implements Director.
func (o *OnDemandDirector) Detach(ctx context.Context, iface string) error {
	return o.change(ctx, func(d *KernelDirector) error { return d.Detach(ctx, iface) })
}

// SetServices implements Director.
func (o *OnDemandDirector) SetServices(ctx context.Context, vips []netip.AddrPort) error {
	return o.change(ctx, func(d *KernelDirector) error { return d.SetServices(ctx, vips) })
}

// read runs f on the pinned map name, read-only, without loading the
// program (lvsd plan reads through here and must change nothing); zero
// values without it.
func read[T any](o *OnDemandDirector, name string, f func(*ebpf.Map) (T, error)) (T, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	var zero T
	if o.d != nil {
		switch name {
		case "toa_services":
			return f(o.d.objs.ToaServices)
		default:
			return f(o.d.objs.ToaDirectorStats)
		}
	}
	m, err := ebpf.LoadPinnedMap(filepath.Join(o.opts.pinRoot(), "director", name), &ebpf.LoadPinOptions{ReadOnly: true})
	if errors.Is(err, os.ErrNotExist) {
		return zero, nil
	}
	if err != nil {
		return zero, fmt.Errorf("toa: reading the pinned map %s: %w", name, err)
	}
	defer m.Close()
	return f(m)
}

// Attached implements Director.
func (o *OnDemandDirector) Attached(ctx context.Context) ([]string, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.d != nil {
		return o.d.Attached(ctx)
	}
	nl, err := o.netlink()
	if err != nil {
		return nil, err
	}
	defer nl.Close()
	return attached(nl, func(string) bool { return true })
}

// Outdated implements Director. Before it is opened it compares the
// attached programs' tags with the embedded program's, learnt once
// (directorTag), and only when some interface carries a program.
func (o *OnDemandDirector) Outdated(ctx context.Context) ([]string, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.d != nil {
		return o.d.Outdated(ctx)
	}
	nl, err := o.netlink()
	if err != nil {
		return nil, err
	}
	defer nl.Close()
	var tagErr error
	out, err := attached(nl, func(tag string) bool {
		want, err := directorTag()
		tagErr = err
		return err == nil && tag != want
	})
	return out, errors.Join(err, tagErr)
}

func (o *OnDemandDirector) netlink() (*netlink.Handle, error) {
	var nl *netlink.Handle
	var err error
	if o.opts.NetNS > 0 {
		nl, err = netlink.NewHandleAt(o.opts.NetNS)
	} else {
		nl, err = netlink.NewHandle()
	}
	if err != nil {
		return nil, fmt.Errorf("toa: netlink: %w", err)
	}
	return nl, nil
}

// Services implements Director.
func (o *OnDemandDirector) Services(ctx context.Context) ([]netip.AddrPort, error) {
	return read(o, "toa_services", pinnedServices)
}

// Stats implements Director.
func (o *OnDemandDirector) Stats(ctx context.Context) (DirectorStats, error) {
	return read(o, "toa_director_stats", directorStats)
}

// Remove implements Director; with nothing pinned it has nothing to do.
func (o *OnDemandDirector) Remove(ctx context.Context) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	d, err := o.open(ctx, false)
	if err != nil || d == nil {
		return err
	}
	err = d.Remove(ctx)
	o.d = nil
	return errors.Join(err, d.Close())
}

// Close implements Director.
func (o *OnDemandDirector) Close() error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.d == nil {
		return nil
	}
	err := o.d.Close()
	o.d = nil
	return err
}
