// Package toa carries a FULLNAT client's address and port to the real server
// in a TCP option of the connection's SYN (TOA, "TCP option address"), with
// eBPF programs on stock kernels instead of a kernel module.
//
// The director's side (KernelDirector) is a tc ingress program on the
// client-facing interface: for TCP to a VIP:port it serves, it overwrites
// with NOPs any option of the TOA kind the client sent, and appends to each
// SYN an option with the packet's source address and port, before IPVS
// rewrites the addresses. The real server's side (KernelRealServer) is a
// sockops program and cgroup/getpeername4 and 6 programs on the cgroup that
// holds the applications: sockops asks listeners to keep their SYN, copies
// the option into the socket's storage when a connection to one of its VIPs
// from one of the directors' source addresses is established, and
// getpeername() and accept() then return the client's address and port.
//
// # The option
//
// Kind 254, as Alibaba's LVS and DPVS use for TOA, so real servers that run
// their toa kernel modules understand lvsd's directors too. After kind and
// length come the client's port and address, both in network byte order:
//
//	IPv4: kind=254 len=8  port(2) addr(4)
//	IPv6: kind=254 len=20 port(2) addr(16)
//
// The length tells the families apart (DPVS's IPv6 layout; Alibaba's IPv6
// patch used kind 253 instead). A SYN whose options leave no room for the
// option (more than 32 bytes of IPv4 or 20 of IPv6 options) passes without
// it and is counted.
//
// # Pinned objects
//
// Every object lives under one folder of a BPF file system (Options.PinRoot,
// /sys/fs/bpf/lvsd/toa by default): the maps are pinned by name, the
// real server's cgroup links and the director's program too, so a restarted
// lvsd adopts them, and Remove deletes everything below the folder. The
// director's tc filter is found again by its name on each interface.
package toa

import (
	"context"
	"encoding/binary"
	"fmt"
	"net/netip"
	"slices"
)

// DefaultPinRoot is where the objects are pinned unless Options says.
const DefaultPinRoot = "/sys/fs/bpf/lvsd/toa"

// Option layout, shared with bpf/toa.h.
const (
	OptionKind   = 254
	OptionLenV4  = 8
	OptionLenV6  = 20
	maxTCPHeader = 60
)

// Director is the director's side as the agent drives it; KernelDirector
// does it in the kernel, FakeDirector in memory.
type Director interface {
	// Attach puts the program on the interface's ingress; again is a no-op.
	Attach(ctx context.Context, iface string) error
	// Detach takes it off; an interface without it is no error.
	Detach(ctx context.Context, iface string) error
	// SetServices makes the set of VIP:ports whose SYNs get the option
	// exactly vips.
	SetServices(ctx context.Context, vips []netip.AddrPort) error
	Stats(ctx context.Context) (DirectorStats, error)
	// Attached lists the interfaces that carry the program (this lvsd's
	// or a previous one's).
	Attached(ctx context.Context) ([]string, error)
	// Outdated lists the interfaces of Attached whose program is not this
	// build's (a previous release's, after an upgrade): Attach replaces it.
	Outdated(ctx context.Context) ([]string, error)
	// Services lists the VIP:ports the program acts on.
	Services(ctx context.Context) ([]netip.AddrPort, error)
	// Pinned reports whether the program's objects exist: they must be
	// removed when no service wants them, attached or not.
	Pinned() bool
	// Remove detaches from every interface and deletes every pinned object.
	Remove(ctx context.Context) error
	// Close lets go of the objects, which stay in the kernel for the next
	// lvsd to adopt.
	Close() error
}

// RealServer is the real server's side as the agent drives it.
type RealServer interface {
	// Attach puts the programs on the cgroup (a cgroup v2 folder); again is
	// a no-op, another cgroup moves them.
	Attach(ctx context.Context, cgroupPath string) error
	// SetServices makes the set of local address:ports whose connections
	// take the client's address exactly local. These are where the
	// directors' connections arrive: with FULLNAT the real server's own
	// address and the service's port.
	SetServices(ctx context.Context, local []netip.AddrPort) error
	// SetDirectors makes the set of source addresses whose SYNs are trusted
	// to carry the option exactly addrs.
	SetDirectors(ctx context.Context, addrs []netip.Addr) error
	Stats(ctx context.Context) (RealServerStats, error)
	// Pinned reports whether the programs' objects exist.
	Pinned() bool
	Remove(ctx context.Context) error
	Close() error
}

// DirectorStats counts packets since the program's maps were created.
type DirectorStats struct {
	Added       uint64 // SYNs that carry the client's address
	NoRoom      uint64 // SYNs whose options left no room: passed without
	Stripped    uint64 // packets whose own TOA option was overwritten
	Unsupported uint64 // SYNs passed without: IPv4 options, data in the SYN, a helper failed
}

// RealServerStats counts connections to the VIPs since the maps were created.
type RealServerStats struct {
	Stored      uint64 // connections whose peer name is the client's
	NotDirector uint64 // from an address that is not a director's: untouched
	NoOption    uint64 // a director's SYN without a usable option
	NoSYN       uint64 // the SYN was not kept: the listener is older than the programs
}

// Options says where the objects are pinned.
type Options struct {
	PinRoot string // a folder on a BPF file system; DefaultPinRoot if empty
}

func (o Options) pinRoot() string {
	if o.PinRoot == "" {
		return DefaultPinRoot
	}
	return o.PinRoot
}

// vipKey is struct toa_vip.
type vipKey struct {
	Addr [16]byte
	Port [2]byte // network byte order
	Pad  uint16
}

// addrKey is struct toa_addr.
type addrKey struct {
	Addr [16]byte
}

func newVIPKey(ap netip.AddrPort) (vipKey, error) {
	if !ap.Addr().IsValid() || ap.Addr().Zone() != "" || ap.Port() == 0 {
		return vipKey{}, fmt.Errorf("toa: %v is not a VIP:port (an address without zone and a port above 0)", ap)
	}
	k := vipKey{Addr: ap.Addr().Unmap().As16()}
	binary.BigEndian.PutUint16(k.Port[:], ap.Port())
	return k, nil
}

func (k vipKey) addrPort() netip.AddrPort {
	return netip.AddrPortFrom(netip.AddrFrom16(k.Addr).Unmap(), binary.BigEndian.Uint16(k.Port[:]))
}

func newAddrKey(a netip.Addr) (addrKey, error) {
	if !a.IsValid() || a.Zone() != "" {
		return addrKey{}, fmt.Errorf("toa: %v is not a director's source address", a)
	}
	return addrKey{Addr: a.Unmap().As16()}, nil
}

// vipKeys checks vips and returns their keys without duplicates.
func vipKeys(vips []netip.AddrPort) ([]vipKey, error) {
	keys := make([]vipKey, 0, len(vips))
	for _, ap := range vips {
		k, err := newVIPKey(ap)
		if err != nil {
			return nil, err
		}
		if !slices.Contains(keys, k) {
			keys = append(keys, k)
		}
	}
	return keys, nil
}

func addrKeys(addrs []netip.Addr) ([]addrKey, error) {
	keys := make([]addrKey, 0, len(addrs))
	for _, a := range addrs {
		k, err := newAddrKey(a)
		if err != nil {
			return nil, err
		}
		if !slices.Contains(keys, k) {
			keys = append(keys, k)
		}
	}
	return keys, nil
}

// Option returns the TOA option for a client, as the director writes it.
func Option(client netip.AddrPort) []byte {
	a := client.Addr().Unmap()
	if a.Is4() {
		b := []byte{OptionKind, OptionLenV4, 0, 0, 0, 0, 0, 0}
		binary.BigEndian.PutUint16(b[2:], client.Port())
		v := a.As4()
		copy(b[4:], v[:])
		return b
	}
	b := make([]byte, OptionLenV6)
	b[0], b[1] = OptionKind, OptionLenV6
	binary.BigEndian.PutUint16(b[2:], client.Port())
	v := a.As16()
	copy(b[4:], v[:])
	return b
}

// ParseOption finds the TOA option among a TCP header's options (the bytes
// after the 20-byte fixed header) and returns the address it carries. It
// reads what the real server's program reads, for tools and tests.
func ParseOption(options []byte) (netip.AddrPort, bool) {
	if len(options) > maxTCPHeader-20 {
		options = options[:maxTCPHeader-20]
	}
	for i := 0; i < len(options); {
		switch kind := options[i]; kind {
		case 0:
			return netip.AddrPort{}, false
		case 1:
			i++
			continue
		}
		if i+1 >= len(options) {
			return netip.AddrPort{}, false
		}
		n := int(options[i+1])
		if n < 2 || i+n > len(options) {
			return netip.AddrPort{}, false
		}
		if options[i] == OptionKind && (n == OptionLenV4 || n == OptionLenV6) {
			port := binary.BigEndian.Uint16(options[i+2:])
			if n == OptionLenV4 {
				return netip.AddrPortFrom(netip.AddrFrom4([4]byte(options[i+4:i+8])), port), true
			}
			return netip.AddrPortFrom(netip.AddrFrom16([16]byte(options[i+4:i+20])), port), true
		}
		i += n
	}
	return netip.AddrPort{}, false
}
