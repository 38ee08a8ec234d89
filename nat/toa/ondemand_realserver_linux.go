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
)

// OnDemandRealServer is a KernelRealServer opened at the first change: a
// real server without client_address loads nothing. Stats reads the
// pinned counters without loading. Safe for concurrent use.
type OnDemandRealServer struct {
	opts Options
	mu   sync.Mutex // guards r
	r    *KernelRealServer
}

var _ RealServer = (*OnDemandRealServer)(nil)

// NewOnDemandRealServer returns a real server's side that opens with opts
// when needed.
func NewOnDemandRealServer(opts Options) *OnDemandRealServer { return &OnDemandRealServer{opts: opts} }

func (o *OnDemandRealServer) dir() string { return filepath.Join(o.opts.pinRoot(), "realserver") }

// Pinned implements RealServer.
func (o *OnDemandRealServer) Pinned() bool {
	_, err := os.Stat(o.dir())
	return err == nil
}

func (o *OnDemandRealServer) change(ctx context.Context, f func(*KernelRealServer) error) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.r == nil {
		r, err := OpenRealServer(ctx, o.opts)
		if err != nil {
			return err
		}
		o.r = r
	}
	return f(o.r)
}

// Attach implements RealServer.
func (o *OnDemandRealServer) Attach(ctx context.Context, cgroupPath string) error {
	return o.change(ctx, func(r *KernelRealServer) error { return r.Attach(ctx, cgroupPath) })
}

// SetServices implements RealServer.
func (o *OnDemandRealServer) SetServices(ctx context.Context, local []netip.AddrPort) error {
	return o.change(ctx, func(r *KernelRealServer) error { return r.SetServices(ctx, local) })
}

// SetDirectors implements RealServer.
func (o *OnDemandRealServer) SetDirectors(ctx context.Context, addrs []netip.Addr) error {
	return o.change(ctx, func(r *KernelRealServer) error { return r.SetDirectors(ctx, addrs) })
}

// Stats implements RealServer; zero without pinned counters.
func (o *OnDemandRealServer) Stats(ctx context.Context) (RealServerStats, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.r != nil {
		return o.r.Stats(ctx)
	}
	m, err := ebpf.LoadPinnedMap(filepath.Join(o.dir(), "toa_realserver_stats"), &ebpf.LoadPinOptions{ReadOnly: true})
	if errors.Is(err, os.ErrNotExist) {
		return RealServerStats{}, nil
	}
	if err != nil {
		return RealServerStats{}, fmt.Errorf("toa: reading the pinned counters: %w", err)
	}
	defer m.Close()
	return realServerStats(m)
}

// Remove implements RealServer; with nothing pinned it has nothing to do.
func (o *OnDemandRealServer) Remove(ctx context.Context) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.r == nil {
		if _, err := os.Stat(o.dir()); err != nil {
			return nil
		}
		r, err := OpenRealServer(ctx, o.opts)
		if err != nil {
			return err
		}
		o.r = r
	}
	err := o.r.Remove(ctx)
	err = errors.Join(err, o.r.Close())
	o.r = nil
	return err
}

// Close implements RealServer.
func (o *OnDemandRealServer) Close() error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.r == nil {
		return nil
	}
	err := o.r.Close()
	o.r = nil
	return err
}
