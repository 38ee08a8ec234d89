package ipvs

import (
	"context"
	"errors"
	"fmt"
	"syscall"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

var _ SyncDaemons = (*Kernel)(nil)

// StartDaemon implements SyncDaemons. A running daemon is only stopped once
// the replacement's settings and interface have been checked.
func (k *Kernel) StartDaemon(ctx context.Context, d Daemon) (DaemonAction, error) {
	if err := checkDaemon(d); err != nil {
		return DaemonUnchanged, fmt.Errorf("%s: %w", describe("starting", d), err)
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	c, err := k.genl(ctx)
	if err != nil {
		return DaemonUnchanged, fmt.Errorf("%s: %w", describe("starting", d), err)
	}
	defer c.s.Close()
	running, err := c.daemons()
	if err != nil {
		return DaemonUnchanged, fmt.Errorf("listing IPVS sync daemons: %w", err)
	}
	mtu, err := k.linkMTU(d.Interface)
	if err != nil {
		return DaemonUnchanged, fmt.Errorf("%s: %w", describe("starting", d), err)
	}
	want, action := d.Effective(mtu), DaemonStarted
	for _, r := range running {
		if r.State != d.State {
			continue
		}
		if r == want {
			return DaemonUnchanged, nil
		}
		if _, err := c.exec(genlCmdDelDaemon, 0, encodeDaemon(r, false)); err != nil && !errors.Is(err, syscall.ESRCH) {
			return DaemonUnchanged, fmt.Errorf("%s to replace it: %w", describe("stopping", r), kernelErr(err))
		}
		action = DaemonRestarted
	}
	if _, err := c.exec(genlCmdNewDaemon, 0, encodeDaemon(d, true)); err != nil {
		if action == DaemonRestarted {
			return action, fmt.Errorf("%s (the previous one was stopped): %w", describe("starting", d), daemonErr(err))
		}
		return DaemonUnchanged, fmt.Errorf("%s: %w", describe("starting", d), daemonErr(err))
	}
	return action, nil
}

// StopDaemon implements SyncDaemons.
func (k *Kernel) StopDaemon(ctx context.Context, state DaemonState) error {
	if err := checkStopState(state); err != nil {
		return err
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	c, err := k.genl(ctx)
	if err != nil {
		return fmt.Errorf("stopping IPVS %s sync daemon: %w", state, err)
	}
	defer c.s.Close()
	// The kernel answers ESRCH when no daemon of that state runs.
	if _, err := c.exec(genlCmdDelDaemon, 0, encodeDaemon(Daemon{State: state}, false)); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("stopping IPVS %s sync daemon: %w", state, kernelErr(err))
	}
	return nil
}

// Daemons implements SyncDaemons.
func (k *Kernel) Daemons(ctx context.Context) ([]Daemon, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	c, err := k.genl(ctx)
	if err != nil {
		return nil, fmt.Errorf("listing IPVS sync daemons: %w", err)
	}
	defer c.s.Close()
	ds, err := c.daemons()
	if err != nil {
		return nil, fmt.Errorf("listing IPVS sync daemons: %w", err)
	}
	return ds, nil
}

// daemonErr adds what the kernel's bare errno means for a start.
func daemonErr(err error) error {
	switch {
	case errors.Is(err, syscall.ENODEV):
		return fmt.Errorf("no such interface in the namespace: %w", err)
	case errors.Is(err, syscall.EINVAL):
		return fmt.Errorf("%w (the kernel also refuses sync while a service has destinations of another address family)", err)
	case errors.Is(err, syscall.ENETUNREACH), errors.Is(err, syscall.EADDRNOTAVAIL):
		return fmt.Errorf("%w (is the interface up?)", err)
	}
	return kernelErr(err)
}

// linkMTU reads name's MTU in the Kernel's namespace; a missing interface is
// ENODEV, as the kernel would answer.
func (k *Kernel) linkMTU(name string) (int, error) {
	h, err := netlink.NewHandleAt(k.ns, unix.NETLINK_ROUTE)
	if err != nil {
		return 0, fmt.Errorf("opening rtnetlink socket: %w", err)
	}
	defer h.Close()
	l, err := h.LinkByName(name)
	var nf netlink.LinkNotFoundError
	if errors.As(err, &nf) {
		return 0, fmt.Errorf("no interface %q in the namespace: %w", name, syscall.ENODEV)
	} else if err != nil {
		return 0, fmt.Errorf("looking up interface %q: %w", name, err)
	}
	return l.Attrs().MTU, nil
}
