package spec

import (
	"fmt"
	"net/netip"
)

// DaemonState is the role of a sync daemon (IP_VS_STATE_MASTER, _BACKUP).
type DaemonState uint32

// Sync daemon roles.
const (
	DaemonMaster DaemonState = 1
	DaemonBackup DaemonState = 2
)

func (s DaemonState) String() string {
	switch s {
	case DaemonMaster:
		return "master"
	case DaemonBackup:
		return "backup"
	}
	return fmt.Sprintf("state-%d", uint32(s))
}

// DefaultSyncGroup is the group a daemon started without one uses
// (IP_VS_SYNC_GROUP; start_sync_thread in net/netfilter/ipvs/ip_vs_sync.c).
var DefaultSyncGroup = netip.AddrFrom4([4]byte{224, 0, 0, 81})

// DefaultSyncPort is the kernel's sync port (IP_VS_SYNC_PORT).
const DefaultSyncPort = 8848

// Daemon is one sync daemon's configuration. Zero fields mean the kernel's
// default; Daemons returns the values in effect, defaults filled in.
type Daemon struct {
	State DaemonState
	// Interface (mcast_ifn) is where a master sends and a backup listens. It
	// must exist and, for a master, be up; "lo" works without an address.
	// The backup's socket is bound to it: datagrams arriving on another
	// interface are not read. Anyone who can send to the group on it can
	// inject connection entries, so keep the interface private (lo is).
	Interface string
	// SyncID tags a master's messages; a backup with SyncID 0 takes every
	// message, otherwise only those of its SyncID (the header field is 8 bits).
	SyncID uint8
	// MaxLen is the UDP payload size (0: 1472 for a master, the interface MTU
	// minus headers, at least 1472, for a backup). The kernel clamps it to
	// 1..65507 for a master and 1024..65507 for a backup (IPv6: 65487).
	MaxLen uint16
	// Group is the multicast group, IPv4 or IPv6 (zero: 224.0.0.81).
	Group netip.Addr
	// Port is the UDP port (0: 8848). With net.ipv4.vs.sync_ports=N the
	// daemon uses Port..Port+N-1; ApplySyncSysctls pins N to 1.
	Port uint16
	// TTL is the multicast TTL / hop limit of a master's datagrams (0: 1).
	TTL uint8
}

func (d Daemon) String() string {
	return fmt.Sprintf("%s on %s syncid=%d group=%s ttl=%d maxlen=%d", d.State, d.Interface, d.SyncID,
		netip.AddrPortFrom(d.Group, d.Port), d.TTL, d.MaxLen)
}

// DaemonAction says what StartDaemon did.
type DaemonAction int

// Outcomes of StartDaemon.
const (
	DaemonUnchanged DaemonAction = iota // the same daemon already ran
	DaemonStarted                       // none ran; started
	DaemonRestarted                     // one with other settings ran; stopped and started
)

func (a DaemonAction) String() string {
	switch a {
	case DaemonUnchanged:
		return "unchanged"
	case DaemonStarted:
		return "started"
	case DaemonRestarted:
		return "restarted"
	}
	return fmt.Sprintf("action-%d", int(a))
}

// Effective returns d as the kernel's start_sync_thread stores it, given the
// MTU of d.Interface (which only a backup's default MaxLen depends on).
func (d Daemon) Effective(mtu int) Daemon {
	d.Group = d.Group.Unmap()
	if !d.Group.IsValid() {
		d.Group = DefaultSyncGroup
	}
	if d.Port == 0 {
		d.Port = DefaultSyncPort
	}
	if d.TTL == 0 {
		d.TTL = 1
	}
	hlen := 20 + 8 // IPv4 + UDP header
	if d.Group.Is6() {
		hlen = 40 + 8
	}
	lo, def := 1, 1500
	if d.State == DaemonBackup {
		lo, def = 1024, min(max(mtu, 1500), 65535)
	}
	if d.MaxLen == 0 {
		d.MaxLen = uint16(def - hlen)
	} else {
		d.MaxLen = uint16(min(max(int(d.MaxLen), lo), 65535-hlen))
	}
	return d
}

// Satisfies reports whether d, a running daemon as Daemons lists it, is
// what want asks for: the same settings once the kernel's defaults are
// filled in. A payload size want leaves to the kernel (0) matches any,
// since a backup's default depends on its interface's MTU.
func (d Daemon) Satisfies(want Daemon) bool {
	w := want.Effective(0)
	if want.MaxLen == 0 {
		w.MaxLen = d.MaxLen
	}
	return d == w
}
