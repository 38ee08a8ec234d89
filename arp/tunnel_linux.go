package arp

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"syscall"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
)

// KernelTunnels manages tunnel devices through rtnetlink and GUE ports
// through the fou generic netlink family, in the current network namespace.
type KernelTunnels struct{}

var _ Tunnels = KernelTunnels{}

// Link implements Tunnels.
func (KernelTunnels) Link(ctx context.Context, dev string) (Link, error) {
	l, err := link(dev)
	if err != nil {
		return Link{}, err
	}
	return Link{Name: dev, Kind: l.Type(), Up: l.Attrs().Flags&unix.IFF_UP != 0}, nil
}

// CreateLink implements Tunnels. Asking rtnetlink for a link of an unknown
// kind makes the kernel load the kind's module (alias rtnl-link-<kind>),
// which needs no privilege beyond CAP_NET_ADMIN: lvsd.service may not load
// modules itself.
func (KernelTunnels) CreateLink(ctx context.Context, dev, kind string) (bool, error) {
	la := netlink.NewLinkAttrs()
	la.Name = dev
	var l netlink.Link
	switch kind {
	case KindIPIP:
		l = &netlink.Iptun{LinkAttrs: la}
	case KindIP6IP6:
		l = &netlink.Ip6tnl{LinkAttrs: la}
	case KindGRE: // the library tells gre from ip6gre by the local address
		l = &netlink.Gretun{LinkAttrs: la, Local: net.IPv4zero, Remote: net.IPv4zero}
	case KindGRE6:
		l = &netlink.Gretun{LinkAttrs: la, Local: net.IPv6zero, Remote: net.IPv6zero}
	default:
		return false, fmt.Errorf("creating %s: unknown tunnel kind %q", dev, kind)
	}
	err := netlink.LinkAdd(l)
	switch {
	case errors.Is(err, unix.EEXIST):
		// The module's fallback device, made when the module loaded.
		return false, nil
	case errors.Is(err, unix.EOPNOTSUPP):
		return false, fmt.Errorf("creating %s (%s): %w: the kernel has no %s tunnels (module missing?)", dev, kind, err, kind)
	case err != nil:
		return false, fmt.Errorf("creating %s (%s): %w", dev, kind, err)
	}
	return true, nil
}

// SetUp implements Tunnels.
func (KernelTunnels) SetUp(ctx context.Context, dev string, up bool) error {
	l, err := link(dev)
	if err != nil {
		return err
	}
	if up {
		err = netlink.LinkSetUp(l)
	} else {
		err = netlink.LinkSetDown(l)
	}
	if err != nil {
		return fmt.Errorf("setting %s up=%v: %w", dev, up, err)
	}
	return nil
}

// DeleteLink implements Tunnels.
func (KernelTunnels) DeleteLink(ctx context.Context, dev string) error {
	l, err := link(dev)
	if err != nil {
		return err
	}
	if err := netlink.LinkDel(l); err != nil {
		return fmt.Errorf("deleting %s: %w", dev, err)
	}
	return nil
}

// FouPorts implements Tunnels. The kernel dumps the ports of both
// families whatever family the request names; each says its own.
func (KernelTunnels) FouPorts(ctx context.Context) ([]FouPort, error) {
	if err := loadFou(); err != nil {
		return nil, err
	}
	var ports []netlink.Fou
	var err error
	for range 5 { // a dump interrupted by a concurrent change returns partial results
		ports, err = netlink.FouList(unix.AF_INET)
		if !errors.Is(err, netlink.ErrDumpInterrupted) {
			break
		}
	}
	if err != nil {
		return nil, fmt.Errorf("listing fou ports: %w", err)
	}
	var out []FouPort
	for _, p := range ports {
		if p.EncapType == netlink.FOU_ENCAP_GUE {
			out = append(out, FouPort{Port: uint16(p.Port), IPv6: p.Family == unix.AF_INET6})
		}
	}
	return out, nil
}

// AddFouPort implements Tunnels. The request carries no IP protocol:
// netlink.FouAdd sends protocol 0 for GUE, which Linux 6.1 refuses with
// ERANGE.
func (KernelTunnels) AddFouPort(ctx context.Context, p FouPort) error {
	if err := loadFou(); err != nil {
		return err
	}
	id, err := netlink.FouFamilyId()
	if err != nil {
		return fmt.Errorf("opening %s: %w", p, err)
	}
	f := toFou(p)
	req := nl.NewNetlinkRequest(id, unix.NLM_F_ACK)
	raw := []byte{netlink.FOU_CMD_ADD, 1, 0, 0} // generic netlink header: command, version
	for _, a := range []*nl.RtAttr{
		nl.NewRtAttr(netlink.FOU_ATTR_PORT, binary.BigEndian.AppendUint16(nil, p.Port)),
		nl.NewRtAttr(netlink.FOU_ATTR_AF, []byte{uint8(f.Family)}),
		nl.NewRtAttr(netlink.FOU_ATTR_TYPE, []byte{netlink.FOU_ENCAP_GUE}),
	} {
		raw = append(raw, a.Serialize()...)
	}
	req.AddRawData(raw)
	_, err = req.Execute(unix.NETLINK_GENERIC, 0)
	switch {
	case errors.Is(err, unix.EEXIST), errors.Is(err, unix.EADDRINUSE):
		return fmt.Errorf("opening %s: %w (%v)", p, ErrExists, err)
	case err != nil:
		return fmt.Errorf("opening %s: %w", p, err)
	}
	return nil
}

// DeleteFouPort implements Tunnels.
func (KernelTunnels) DeleteFouPort(ctx context.Context, p FouPort) error {
	if err := netlink.FouDel(toFou(p)); err != nil {
		if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ESRCH) {
			return fmt.Errorf("closing %s: %w", p, ErrNotFound)
		}
		return fmt.Errorf("closing %s: %w", p, err)
	}
	return nil
}

func toFou(p FouPort) netlink.Fou {
	f := netlink.Fou{Family: unix.AF_INET, Port: int(p.Port), EncapType: netlink.FOU_ENCAP_GUE}
	if p.IPv6 {
		f.Family = unix.AF_INET6
	}
	return f
}

// loadFou makes sure the fou generic netlink family exists. Kernels before
// 6.4 do not load the fou module on demand (no family alias): lvsd tries
// modprobe, which fails under lvsd.service (no CAP_SYS_MODULE); the
// package's modules-load.d file loads fou at boot instead.
func loadFou() error {
	if _, err := netlink.FouFamilyId(); err == nil {
		return nil
	}
	_ = exec.Command("modprobe", "-q", "fou").Run()
	_ = exec.Command("modprobe", "-q", "fou6").Run()
	if _, err := netlink.FouFamilyId(); err != nil {
		return fmt.Errorf("no fou (GUE) support in the kernel (%v): load the fou and fou6 modules (modprobe fou fou6; lvsd's /usr/lib/modules-load.d/lvsd.conf does at boot): %w", err, syscall.ENOENT)
	}
	return nil
}
