package ipvs

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"

	mobyipvs "github.com/moby/ipvs"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
)

// Kernel programs the IPVS tables of one network namespace through generic netlink.
type Kernel struct {
	mu sync.Mutex // guards h (its socket is not safe for concurrent requests) and serializes daemon changes
	h  *mobyipvs.Handle
	// writers are the sockets of service and destination writes, each
	// used by one request at a time: the kernel runs IPVS commands one
	// at a time, but a request's user-space half (building, sending,
	// waking for the answer) overlaps another's kernel half. Measured in
	// the test VM, 1,000 services × 10: 4 sockets program them 25–35 %
	// faster than one.
	writers chan *mobyipvs.Handle
	ns      netns.NsHandle // the namespace of Open's netnsPath, for the generic netlink socket; None: the caller's
	// tunnelAttrsWork says a tunnel type written through lvsd's own
	// netlink was read back (tunnel_linux.go); guarded by mu.
	tunnelAttrsWork bool
	// dump is the generic netlink socket kept for reading destinations
	// (dest_linux.go); guarded by mu.
	dump *genlConn
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
	k := &Kernel{ns: ns, writers: make(chan *mobyipvs.Handle, Writers)}
	for range 1 + Writers {
		h, err := mobyipvs.New(netnsPath)
		if err != nil {
			k.Close()
			return nil, fmt.Errorf("opening IPVS netlink socket: %w", err)
		}
		if k.h == nil {
			k.h = h
		} else {
			k.writers <- h
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

// Close releases the netlink socket and the namespace handle.
func (k *Kernel) Close() {
	k.mu.Lock()
	k.closeDump()
	k.mu.Unlock()
	if k.h != nil {
		k.h.Close()
	}
	for len(k.writers) > 0 {
		(<-k.writers).Close()
	}
	if k.ns.IsOpen() {
		k.ns.Close()
	}
}

// Services implements Interface.
func (k *Kernel) Services(ctx context.Context) ([]Service, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	raw, err := k.h.GetServices()
	if err != nil {
		return nil, fmt.Errorf("listing IPVS services: %w", err)
	}
	out := make([]Service, 0, len(raw))
	for _, s := range raw {
		out = append(out, fromMobyService(s))
	}
	return out, nil
}

// Service implements Interface.
func (k *Kernel) Service(ctx context.Context, svc ServiceKey) (Service, error) {
	k.mu.Lock()
	raw, err := k.h.GetService(toMobyService(Service{ServiceKey: svc}))
	k.mu.Unlock()
	if err != nil {
		return Service{}, fmt.Errorf("getting service %s: %w", svc, kernelErr(err))
	}
	return fromMobyService(raw), nil
}

// AddService implements Interface.
func (k *Kernel) AddService(ctx context.Context, svc Service) error {
	return k.do(func(h *mobyipvs.Handle) error { return h.NewService(toMobyService(svc)) },
		func() string { return "adding service " + svc.String() })
}

// UpdateService implements Interface.
func (k *Kernel) UpdateService(ctx context.Context, svc Service) error {
	return k.do(func(h *mobyipvs.Handle) error { return h.UpdateService(toMobyService(svc)) },
		func() string { return "updating service " + svc.String() })
}

// DeleteService implements Interface.
func (k *Kernel) DeleteService(ctx context.Context, svc ServiceKey) error {
	return k.do(func(h *mobyipvs.Handle) error { return h.DelService(toMobyService(Service{ServiceKey: svc})) },
		func() string { return "deleting service " + svc.String() })
}

// AddDestination implements Interface.
func (k *Kernel) AddDestination(ctx context.Context, svc ServiceKey, dst Destination) error {
	if needsOwnNetlink(dst) {
		return described(k.writeTunnelDestination(ctx, genlCmdNewDest, svc, dst),
			func() string { return "adding destination " + svc.String() + " -> " + dst.String() })
	}
	return k.do(func(h *mobyipvs.Handle) error {
		return h.NewDestination(toMobyService(Service{ServiceKey: svc}), toMobyDestination(dst))
	},
		func() string { return "adding destination " + svc.String() + " -> " + dst.String() })
}

// UpdateDestination implements Interface.
func (k *Kernel) UpdateDestination(ctx context.Context, svc ServiceKey, dst Destination) error {
	if needsOwnNetlink(dst) {
		return described(k.writeTunnelDestination(ctx, genlCmdSetDest, svc, dst),
			func() string { return "updating destination " + svc.String() + " -> " + dst.String() })
	}
	return k.do(func(h *mobyipvs.Handle) error {
		return h.UpdateDestination(toMobyService(Service{ServiceKey: svc}), toMobyDestination(dst))
	},
		func() string { return "updating destination " + svc.String() + " -> " + dst.String() })
}

// DeleteDestination implements Interface.
func (k *Kernel) DeleteDestination(ctx context.Context, svc ServiceKey, dst DestinationKey) error {
	return k.do(func(h *mobyipvs.Handle) error {
		return h.DelDestination(toMobyService(Service{ServiceKey: svc}), toMobyDestination(Destination{DestinationKey: dst}))
	}, func() string { return "deleting destination " + svc.String() + " -> " + dst.String() })
}

// do runs one write on a free writer socket; what describes it, and is
// only formatted on error (a cold start makes tens of thousands of
// requests).
func (k *Kernel) do(f func(*mobyipvs.Handle) error, what func() string) error {
	h := <-k.writers
	err := f(h)
	k.writers <- h
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

func toMobyService(s Service) *mobyipvs.Service {
	m := &mobyipvs.Service{
		AddressFamily: syscall.AF_INET,
		Protocol:      uint16(s.Protocol),
		Port:          s.Port,
		FWMark:        s.FWMark,
		SchedName:     s.Scheduler,
		Flags:         uint32(s.Flags &^ flagHashed),
		Timeout:       s.Timeout,
	}
	if s.IPv6 || s.Addr.Is6() && !s.Addr.Is4In6() {
		m.AddressFamily = syscall.AF_INET6
	}
	if s.Addr.IsValid() {
		m.Address = net.IP(s.Addr.AsSlice())
	} else if m.AddressFamily == syscall.AF_INET6 {
		m.Address = net.IPv6zero
	} else {
		m.Address = net.IPv4zero.To4()
	}
	// The kernel reads the IPv4 netmask as raw mask bytes but the IPv6 one as
	// a prefix length (and rejects 0 for IPv6 even without persistence).
	bits := s.NetmaskBits()
	if m.AddressFamily == syscall.AF_INET6 {
		m.Netmask = uint32(bits)
	} else {
		mask := net.CIDRMask(bits, 32)
		m.Netmask = nativeUint32(mask)
	}
	return m
}

func fromMobyService(m *mobyipvs.Service) Service {
	s := Service{
		ServiceKey: ServiceKey{
			Protocol: Protocol(m.Protocol),
			Port:     m.Port,
			FWMark:   m.FWMark,
			IPv6:     m.AddressFamily == syscall.AF_INET6,
		},
		Scheduler: m.SchedName,
		Flags:     Flags(m.Flags) &^ flagHashed,
		Timeout:   m.Timeout,
	}
	if m.FWMark == 0 {
		if a, ok := netip.AddrFromSlice(m.Address); ok {
			s.Addr = a.Unmap()
		}
		s.Protocol = Protocol(m.Protocol)
	} else {
		s.Protocol = 0
	}
	if s.IPv6 {
		s.Netmask = int(m.Netmask)
	} else {
		ones, _ := net.IPMask(nativeBytes(m.Netmask)).Size()
		s.Netmask = ones
	}
	if s.Netmask == netmaskBitsHost(s) {
		s.Netmask = 0
	}
	return s
}

func netmaskBitsHost(s Service) int {
	if s.IPv6 {
		return 128
	}
	return 32
}

func toMobyDestination(d Destination) *mobyipvs.Destination {
	m := &mobyipvs.Destination{
		Address:         net.IP(d.Addr.AsSlice()),
		Port:            d.Port,
		Weight:          d.Weight,
		ConnectionFlags: uint32(d.Forwarding),
		AddressFamily:   syscall.AF_INET,
		UpperThreshold:  d.UpperThreshold,
		LowerThreshold:  d.LowerThreshold,
	}
	if d.Addr.Is6() {
		m.AddressFamily = syscall.AF_INET6
	}
	return m
}
