package ipvs

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
)

// Kernel programs the IPVS tables of one network namespace through generic
// netlink: services and timeouts through moby/ipvs (moby_linux.go),
// destinations through lvsd's own requests (dest_linux.go), sync daemons
// through lvsd's own too (daemon_linux.go).
type Kernel struct {
	mu sync.Mutex // guards h and dump (their sockets are not safe for concurrent requests) and serializes daemon changes
	h  mobyConn   // service and timeout reads
	// writers are the sockets of service and destination writes, each
	// used by one request at a time: the kernel runs IPVS commands one
	// at a time, but a request's user-space half (building, sending,
	// waking for the answer) overlaps another's kernel half. Measured in
	// the test VM, 1,000 services × 10: 4 sockets program them 25–35 %
	// faster than one.
	writers chan *writer
	ns      netns.NsHandle // the namespace of Open's netnsPath, for the generic netlink socket; None: the caller's
	// tunnelAttrsWork says a tunnel type written with the destination
	// was read back (tunnel_linux.go).
	tunnelAttrsWork atomic.Bool
	// dump is the generic netlink socket kept for reading destinations
	// (dest_linux.go); guarded by mu.
	dump *genlConn
}

// writer is one of the Kernel's concurrent writes: a moby/ipvs socket for
// services and timeouts, and a generic netlink socket for destinations.
type writer struct {
	moby mobyConn
	// dest is opened at its first destination write, and again after a
	// failure that may have left replies in it.
	dest *genlConn
}

var _ Interface = (*Kernel)(nil)

// Open checks that the running kernel has IPVS (loading ip_vs and ip_vs_mh if
// it can) and returns a handle for the namespace at netnsPath ("" = current).
// It fails with ErrNotAvailable, and says what is missing, rather than return
// a handle that silently does nothing.
func Open(netnsPath string) (*Kernel, error) {
	if err := Probe(); err != nil {
		return nil, err
	}
	ns := netns.None()
	if netnsPath != "" {
		var err error
		if ns, err = netns.GetFromPath(netnsPath); err != nil {
			return nil, fmt.Errorf("opening network namespace %s: %w", netnsPath, err)
		}
	}
	k := &Kernel{ns: ns, writers: make(chan *writer, Writers)}
	for i := range 1 + Writers {
		c, err := openMoby(netnsPath)
		if err != nil {
			k.Close()
			return nil, fmt.Errorf("opening IPVS netlink socket: %w", err)
		}
		if i == 0 {
			k.h = c
		} else {
			k.writers <- &writer{moby: c}
		}
	}
	return k, nil
}

// Writers is how many service and destination writes a Kernel runs at
// once, each on its own socket.
const Writers = 4

// Probe reports whether the kernel offers the IPVS generic netlink family.
func Probe() error {
	// Loading is best effort: a kernel with IPVS built in has nothing to load,
	// and a host without modprobe may have loaded the modules at boot.
	for _, m := range []string{"ip_vs", "ip_vs_mh"} {
		_ = exec.Command("modprobe", "-q", m).Run()
	}
	if _, err := netlink.GenlFamilyGet("IPVS"); err != nil {
		hint := "load the ip_vs kernel module (modprobe ip_vs) or use a kernel built with CONFIG_IP_VS"
		if _, statErr := os.Stat("/proc/sys/kernel/modprobe"); statErr != nil {
			hint = "this kernel has no IPVS and cannot load modules; run lvsd on a kernel with CONFIG_IP_VS"
		}
		return fmt.Errorf("%w: the kernel has no IPVS generic netlink family (%v); %s", ErrNotAvailable, err, hint)
	}
	return nil
}

// Close releases the netlink sockets and the namespace handle.
func (k *Kernel) Close() {
	k.mu.Lock()
	k.closeDump()
	k.mu.Unlock()
	k.h.close()
	for len(k.writers) > 0 {
		w := <-k.writers
		w.moby.close()
		w.closeDest()
	}
	if k.ns.IsOpen() {
		k.ns.Close()
	}
}

// Services implements Interface.
func (k *Kernel) Services(ctx context.Context) ([]Service, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	out, err := k.h.services()
	if err != nil {
		return nil, fmt.Errorf("listing IPVS services: %w", err)
	}
	return out, nil
}

// Service implements Interface.
func (k *Kernel) Service(ctx context.Context, svc ServiceKey) (Service, error) {
	k.mu.Lock()
	s, err := k.h.service(svc)
	k.mu.Unlock()
	if err != nil {
		return Service{}, fmt.Errorf("getting service %s: %w", svc, kernelErr(err))
	}
	return s, nil
}

// AddService implements Interface.
func (k *Kernel) AddService(ctx context.Context, svc Service) error {
	return k.do(func(c mobyConn) error { return c.addService(svc) },
		func() string { return "adding service " + svc.String() })
}

// UpdateService implements Interface.
func (k *Kernel) UpdateService(ctx context.Context, svc Service) error {
	return k.do(func(c mobyConn) error { return c.updateService(svc) },
		func() string { return "updating service " + svc.String() })
}

// DeleteService implements Interface.
func (k *Kernel) DeleteService(ctx context.Context, svc ServiceKey) error {
	return k.do(func(c mobyConn) error { return c.deleteService(svc) },
		func() string { return "deleting service " + svc.String() })
}

// AddDestination implements Interface.
func (k *Kernel) AddDestination(ctx context.Context, svc ServiceKey, dst Destination) error {
	return described(k.writeDest(ctx, genlCmdNewDest, svc, dst),
		func() string { return "adding destination " + svc.String() + " -> " + dst.String() })
}

// UpdateDestination implements Interface.
func (k *Kernel) UpdateDestination(ctx context.Context, svc ServiceKey, dst Destination) error {
	return described(k.writeDest(ctx, genlCmdSetDest, svc, dst),
		func() string { return "updating destination " + svc.String() + " -> " + dst.String() })
}

// DeleteDestination implements Interface.
func (k *Kernel) DeleteDestination(ctx context.Context, svc ServiceKey, dst DestinationKey) error {
	return described(k.writeDest(ctx, genlCmdDelDest, svc, Destination{DestinationKey: dst}),
		func() string { return "deleting destination " + svc.String() + " -> " + dst.String() })
}

// do runs one write on a free writer socket; what describes it, and is
// only formatted on error (a cold start makes tens of thousands of
// requests).
func (k *Kernel) do(f func(mobyConn) error, what func() string) error {
	w := <-k.writers
	err := f(w.moby)
	k.writers <- w
	if err != nil {
		err = kernelErr(err)
		desc := what()
		if errors.Is(err, syscall.ENOENT) && strings.HasPrefix(desc, "adding service") {
			return fmt.Errorf("%s: %w (is the scheduler's module, e.g. ip_vs_mh, available?)", desc, err)
		}
		return fmt.Errorf("%s: %w", desc, err)
	}
	return nil
}

// described prefixes a failed request's error with what it was.
func described(err error, what func() string) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%s: %w", what(), err)
}

// kernelErr maps errno values to the package's sentinel errors so callers can
// tell a duplicate or a missing object from a real failure.
func kernelErr(err error) error {
	switch {
	case errors.Is(err, syscall.EEXIST):
		return fmt.Errorf("%w: %w", ErrExists, err)
	case errors.Is(err, syscall.ESRCH), errors.Is(err, syscall.ENOENT):
		return fmt.Errorf("%w: %w", ErrNotFound, err)
	}
	return err
}
