package topo

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// Host is one network namespace of a topology. Its methods are safe for
// concurrent use. A nil *Host stands for the namespace the process started
// in, so helpers written against *Host also work outside a topology.
type Host struct {
	// ID is the host's role in the topology: "client", "director", "rs1", …
	ID string
	// Name is the netns name, usable with `ip netns exec` / `ip -n`.
	Name string
	// Link is the name of the host's interface inside its namespace.
	Link string
	// Port is the name of the bridge port (root side of the veth) in the
	// original namespace.
	Port string
	// V4 and V6 are the host's primary addresses (zero if it has none).
	V4, V6 netip.Addr
	// MAC is the hardware address of Link.
	MAC net.HardwareAddr

	ns netns.NsHandle
	nl *netlink.Handle // netlink socket inside the namespace
}

// Addr returns the primary address of one family.
func (h *Host) Addr(v6 bool) netip.Addr {
	if v6 {
		return h.V6
	}
	return h.V4
}

// String names the host in messages: "rs1(lt123-1-rs1)".
func (h *Host) String() string {
	if h == nil {
		return "<root netns>"
	}
	return h.ID + "(" + h.Name + ")"
}

// AddHost creates one more host named id (letters, digits, '-') with the
// given addresses on its Link, in order (the first of each family becomes
// V4/V6 and the kernel's primary). Standard hosts are created by New; use
// this for extra roles, e.g. a second client.
func (tp *Topology) AddHost(id string, addrs ...netip.Prefix) (*Host, error) {
	h, err := tp.addHost(id, addrs)
	if err == nil {
		err = waitReady(h)
	}
	if err != nil {
		return nil, err
	}
	return h, nil
}

func (tp *Topology) addHost(id string, addrs []netip.Prefix) (*Host, error) {
	return tp.addHostOn(id, addrs, nil)
}

// addHostOn creates a host whose Link is on seg's bridge, or on the
// topology's own bridge for a nil seg.
func (tp *Topology) addHostOn(id string, addrs []netip.Prefix, seg *Segment) (*Host, error) {
	if id == "" || strings.Trim(id, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-") != "" {
		return nil, fmt.Errorf("bad host id %q", id)
	}
	h := &Host{
		ID:   id,
		Name: tp.Prefix + "-" + id,
		Link: "eth0",
		ns:   netns.None(),
	}
	for _, p := range addrs {
		if p.Addr().Is4() && !h.V4.IsValid() {
			h.V4 = p.Addr()
		}
		if p.Addr().Is6() && !h.V6.IsValid() {
			h.V6 = p.Addr()
		}
	}
	if h.V4.IsValid() {
		// Predictable MACs make packet traces readable: 02:00:<v4 address>.
		a := h.V4.As4()
		h.MAC = net.HardwareAddr{0x02, 0x00, a[0], a[1], a[2], a[3]}
	}

	tp.mu.Lock()
	if tp.closed {
		tp.mu.Unlock()
		return nil, fmt.Errorf("topology %s is closed", tp.Prefix)
	}
	for _, o := range tp.all {
		if o.ID == id {
			tp.mu.Unlock()
			return nil, fmt.Errorf("host %q exists", id)
		}
	}
	h.Port = tp.Prefix + "-" + strconv.Itoa(len(tp.all)+1)
	// Listed for cleanup before creation so a half-made host is removed too;
	// visible through Host/Hosts only once complete.
	tp.all = append(tp.all, h)
	tp.mu.Unlock()

	if err := tp.create(h, addrs, seg); err != nil {
		return nil, fmt.Errorf("host %s: %w", id, err)
	}
	tp.mu.Lock()
	tp.hosts = append(tp.hosts, h)
	tp.byName[id], tp.byName[h.Name] = h, h
	tp.mu.Unlock()
	return h, nil
}

// create builds the namespace, its veth and addresses, and its routes: a
// host of a segment routes everything through the segment's router.
func (tp *Topology) create(h *Host, addrs []netip.Prefix, seg *Segment) error {
	ns, err := newNamedNS(h.Name, func() error {
		// Inside the new namespace, before eth0 exists, so eth0 inherits
		// "default". DAD off: new addresses would otherwise stay tentative
		// (unusable) for a second or more. rp_filter off: the original
		// namespace's value would otherwise be inherited (IPv4 only), and it
		// differs between machines.
		for _, kv := range [][2]string{
			{"net/ipv6/conf/all/accept_dad", "0"},
			{"net/ipv6/conf/default/accept_dad", "0"},
			{"net/ipv4/conf/all/rp_filter", "0"},
			{"net/ipv4/conf/default/rp_filter", "0"},
		} {
			if err := writeSysctl(kv[0], kv[1]); err != nil {
				return err
			}
		}
		hnd, err := netlink.NewHandle(unix.NETLINK_ROUTE) // socket opened in this namespace
		if err != nil {
			return err
		}
		h.nl = hnd
		// Without lo up, IPVS refuses destinations ("address not unicast")
		// and local traffic fails.
		lo, err := hnd.LinkByName("lo")
		if err == nil {
			err = hnd.LinkSetUp(lo)
		}
		return err
	})
	if err != nil {
		if h.nl != nil {
			h.nl.Close()
			h.nl = nil
		}
		return err
	}
	h.ns = ns

	bridge := tp.bridge
	if seg != nil {
		bridge = seg.bridge
	}
	link, err := tp.plug(h, h.Link, h.Port, h.MAC, bridge, addrs)
	if err != nil {
		return err
	}
	if h.MAC == nil {
		h.MAC = link.Attrs().HardwareAddr
	}
	if seg != nil {
		for _, gw := range seg.gateways {
			if err := h.SetDefaultRoute(gw.Addr()); err != nil {
				return err
			}
		}
		return nil
	}
	if tp.cfg.sources > sourcesIn24 {
		if err := tp.routeExtraSources(h); err != nil {
			return err
		}
	}
	for _, gw := range tp.cfg.gateways {
		if gw != h.V4 && gw != h.V6 {
			if err := h.SetDefaultRoute(gw); err != nil {
				return err
			}
		}
	}
	return nil
}

// plug connects dev in h's namespace to bridge through a veth whose root
// side is port, brings it up and gives it addrs (mac: nil lets the kernel
// choose).
func (tp *Topology) plug(h *Host, dev, port string, mac net.HardwareAddr, bridge netlink.Link, addrs []netip.Prefix) (netlink.Link, error) {
	la := netlink.NewLinkAttrs()
	la.Name = port
	la.Group = tp.group
	la.MasterIndex = bridge.Attrs().Index
	la.Flags = net.FlagUp
	veth := netlink.NewVeth(la)
	veth.PeerName = dev
	veth.PeerHardwareAddr = mac
	veth.PeerNamespace = netlink.NsFd(int(h.ns))
	if err := tp.root.LinkAdd(veth); err != nil {
		return nil, fmt.Errorf("add veth %s: %w", port, err)
	}
	link, err := h.nl.LinkByName(dev)
	if err != nil {
		return nil, err
	}
	if err := h.nl.LinkSetUp(link); err != nil {
		return nil, err
	}
	for _, p := range addrs {
		if extraNets[0].Contains(p.Addr()) || extraNets[1].Contains(p.Addr()) {
			continue // held by a local route, see extraNets
		}
		if err := h.addAddr(link, p); err != nil {
			return nil, err
		}
	}
	return link, nil
}

// routeExtraSources makes the client own extraNets and routes them to it
// from every other host.
func (tp *Topology) routeExtraSources(h *Host) error {
	if h.ID != "client" {
		for i, p := range extraNets {
			if err := h.AddRoute(p, [2]netip.Addr{pfx4(1).Addr(), pfx6(1).Addr()}[i]); err != nil {
				return err
			}
		}
		return nil
	}
	lo, err := h.nl.LinkByName("lo")
	if err != nil {
		return err
	}
	for _, p := range extraNets {
		r := &netlink.Route{Dst: ipNet(p), LinkIndex: lo.Attrs().Index, Table: unix.RT_TABLE_LOCAL,
			Type: unix.RTN_LOCAL, Scope: netlink.SCOPE_HOST}
		if err := h.nl.RouteAdd(r); err != nil {
			return fmt.Errorf("local route %s: %w", p, err)
		}
	}
	// IPv6 bind() checks interface addresses, not local routes (IPv4 is
	// content with the route).
	return h.Sysctl("net/ipv6/ip_nonlocal_bind", "1")
}

// destroy removes the host's bridge port (and so its veth pair) and its
// namespace name.
func (h *Host) destroy(root *netlink.Handle) error {
	var errs []error
	if l, err := root.LinkByName(h.Port); err == nil {
		if err := root.LinkDel(l); err != nil && !isNotFound(err) {
			errs = append(errs, fmt.Errorf("delete %s: %w", h.Port, err))
		}
	} else if !isNotFound(err) {
		errs = append(errs, err)
	}
	if h.nl != nil {
		h.nl.Close()
	}
	if h.ns.IsOpen() {
		h.ns.Close()
		if err := netns.DeleteNamed(h.Name); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, fmt.Errorf("delete netns %s: %w", h.Name, err))
		}
	}
	return errors.Join(errs...)
}

// Do runs f on an OS thread switched into the host's namespace: sockets
// and netlink handles f creates, /proc/sys it opens and processes it starts
// belong there. Goroutines started by f do not run in the namespace. Read
// /proc/thread-self/net/... inside f, not /proc/net/... (that follows the
// process's main thread). On a nil Host, f runs directly.
func (h *Host) Do(f func() error) error {
	if h == nil {
		return f()
	}
	return inNS(h.ns, f)
}

// Sysctl writes a sysctl inside the host's namespace. key is a path below
// /proc/sys ("net/ipv4/conf/all/arp_ignore") or the dotted form
// ("net.ipv4.conf.all.arp_ignore"; use the slash form for interface names
// containing dots).
func (h *Host) Sysctl(key, value string) error {
	return h.Do(func() error { return writeSysctl(key, value) })
}

// ReadSysctl reads a sysctl inside the host's namespace, without the
// trailing newline.
func (h *Host) ReadSysctl(key string) (string, error) {
	var v string
	err := h.Do(func() error {
		b, err := os.ReadFile(sysctlPath(key))
		v = strings.TrimSpace(string(b))
		return err
	})
	return v, err
}

func sysctlPath(key string) string {
	key = strings.TrimPrefix(key, "/proc/sys/")
	if !strings.Contains(key, "/") {
		key = strings.ReplaceAll(key, ".", "/")
	}
	return "/proc/sys/" + key
}

// writeSysctl writes in the namespace of the calling thread: /proc/sys/net
// resolves to the namespace of the thread that opens it.
func writeSysctl(key, value string) error {
	if err := os.WriteFile(sysctlPath(key), []byte(value), 0); err != nil {
		return fmt.Errorf("sysctl %s=%s: %w", key, value, err)
	}
	return nil
}
