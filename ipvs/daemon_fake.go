package ipvs

import (
	"context"
	"fmt"
	"syscall"
)

// fakeDaemons is the Fake's sync-daemon state.
type fakeDaemons struct {
	running [3]*Daemon     // by DaemonState; effective settings
	links   map[string]int // interface name -> MTU; nil: every name exists, MTU 1500
}

var _ SyncDaemons = (*Fake)(nil)

// SetInterface declares an interface for the Fake's sync daemons. Once one is
// declared, starting a daemon on an undeclared interface fails with ENODEV,
// as in the kernel; the MTU sets a backup's default MaxLen.
func (f *Fake) SetInterface(name string, mtu int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.daemons.links == nil {
		f.daemons.links = map[string]int{}
	}
	f.daemons.links[name] = mtu
}

// StartDaemon implements SyncDaemons like the kernel: defaults filled in,
// MaxLen clamped, a daemon with other settings replaced.
func (f *Fake) StartDaemon(ctx context.Context, d Daemon) (DaemonAction, error) {
	if err := checkDaemon(d); err != nil {
		return DaemonUnchanged, fmt.Errorf("%s: %w", describe("starting", d), err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	mtu, ok := 1500, true
	if f.daemons.links != nil {
		mtu, ok = f.daemons.links[d.Interface]
	}
	if !ok {
		return DaemonUnchanged, fmt.Errorf("%s: no interface %q in the namespace: %w",
			describe("starting", d), d.Interface, syscall.ENODEV)
	}
	want, action := d.Effective(mtu), DaemonStarted
	if cur := f.daemons.running[d.State]; cur != nil {
		if *cur == want {
			return DaemonUnchanged, nil
		}
		action = DaemonRestarted
		f.ops = append(f.ops, "stop-daemon "+d.State.String())
	}
	f.daemons.running[d.State] = &want
	f.ops = append(f.ops, "start-daemon "+want.String())
	return action, nil
}

// StopDaemon implements SyncDaemons.
func (f *Fake) StopDaemon(ctx context.Context, state DaemonState) error {
	if err := checkStopState(state); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.daemons.running[state] != nil {
		f.daemons.running[state] = nil
		f.ops = append(f.ops, "stop-daemon "+state.String())
	}
	return nil
}

// Daemons implements SyncDaemons.
func (f *Fake) Daemons(ctx context.Context) ([]Daemon, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []Daemon
	for _, d := range f.daemons.running {
		if d != nil {
			out = append(out, *d)
		}
	}
	return out, nil
}
