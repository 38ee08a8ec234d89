package agent

import (
	"fmt"
	"net/netip"
	"time"

	"github.com/lvsd/lvsd/ipvs"
	"github.com/lvsd/lvsd/ipvs/l4"
)

// The snapshot names IPVS's values itself rather than by package ipvs's Go
// field names, so that renaming a field cannot change the document; the
// numbers are the kernel's (protocol, flags, forwarding method).

// SnapshotKey is an IPVS service's key.
type SnapshotKey struct {
	Address  netip.Addr `json:"address,omitzero"` // none for a fwmark service
	FWMark   uint32     `json:"fwmark,omitempty"`
	Port     uint16     `json:"port,omitempty"`
	Protocol uint8      `json:"protocol,omitempty"` // IP protocol number; none for a fwmark service
	IPv6     bool       `json:"ipv6,omitempty"`
}

// SnapshotService is an IPVS service with its destinations in the
// kernel's order.
type SnapshotService struct {
	SnapshotKey
	Scheduler          string                `json:"scheduler"`
	Flags              uint32                `json:"flags,omitempty"` // IP_VS_SVC_F_*
	PersistenceTimeout uint32                `json:"persistence_timeout,omitempty"`
	Netmask            int                   `json:"netmask,omitempty"`
	Destinations       []SnapshotDestination `json:"destinations"`
}

// SnapshotDestination is an IPVS destination, without its traffic
// counters: they change no plan.
type SnapshotDestination struct {
	Address             netip.Addr `json:"address"`
	Port                uint16     `json:"port"`
	Weight              int        `json:"weight"`
	Forwarding          uint8      `json:"forwarding"` // IP_VS_CONN_F_FWD_MASK: 0 masq, 2 tunnel, 3 route
	TunnelType          uint8      `json:"tunnel_type,omitempty"`
	TunnelPort          uint16     `json:"tunnel_port,omitempty"`
	TunnelFlags         uint16     `json:"tunnel_flags,omitempty"`
	UpperThreshold      uint32     `json:"upper_threshold,omitempty"`
	LowerThreshold      uint32     `json:"lower_threshold,omitempty"`
	ActiveConnections   uint32     `json:"active_connections"`
	InactiveConnections uint32     `json:"inactive_connections"`
}

// SnapshotDaemon is a running connection-sync daemon.
type SnapshotDaemon struct {
	State     string     `json:"state"` // master or backup
	Interface string     `json:"interface"`
	SyncID    uint8      `json:"sync_id"`
	MaxLen    uint16     `json:"max_len"`
	Group     netip.Addr `json:"group,omitzero"`
	Port      uint16     `json:"port"`
	TTL       uint8      `json:"ttl"`
}

// SnapshotTimeouts are the IPVS timeouts, in seconds as ipvsadm shows them.
type SnapshotTimeouts struct {
	TCP    int64 `json:"tcp"`
	TCPFin int64 `json:"tcp_fin"`
	UDP    int64 `json:"udp"`
}

func snapshotKey(k ipvs.ServiceKey) SnapshotKey {
	return SnapshotKey{Address: k.Addr, FWMark: k.FWMark, Port: k.Port, Protocol: uint8(k.Protocol), IPv6: k.IPv6}
}

func (k SnapshotKey) key() ipvs.ServiceKey {
	return ipvs.ServiceKey{Addr: k.Address, FWMark: k.FWMark, Port: k.Port, Protocol: l4.Protocol(k.Protocol), IPv6: k.IPv6}
}

func snapshotService(s ipvs.Service, dsts []ipvs.Destination) SnapshotService {
	out := SnapshotService{SnapshotKey: snapshotKey(s.ServiceKey), Scheduler: s.Scheduler, Flags: uint32(s.Flags),
		PersistenceTimeout: s.Timeout, Netmask: s.Netmask, Destinations: make([]SnapshotDestination, 0, len(dsts))}
	for _, d := range dsts {
		out.Destinations = append(out.Destinations, SnapshotDestination{Address: d.Addr, Port: d.Port, Weight: d.Weight,
			Forwarding: uint8(d.Forwarding), TunnelType: uint8(d.Tunnel.Type), TunnelPort: d.Tunnel.Port,
			TunnelFlags: uint16(d.Tunnel.Flags), UpperThreshold: d.UpperThreshold, LowerThreshold: d.LowerThreshold,
			ActiveConnections: d.ActiveConns, InactiveConnections: d.InactiveConns})
	}
	return out
}

func (s SnapshotService) service() ipvs.Service {
	return ipvs.Service{ServiceKey: s.key(), Scheduler: s.Scheduler, Flags: ipvs.Flags(s.Flags), Timeout: s.PersistenceTimeout,
		Netmask: s.Netmask}
}

func (s SnapshotService) destinations() []ipvs.Destination {
	out := make([]ipvs.Destination, 0, len(s.Destinations))
	for _, d := range s.Destinations {
		out = append(out, ipvs.Destination{DestinationKey: ipvs.DestinationKey{Addr: d.Address, Port: d.Port}, Weight: d.Weight,
			Forwarding:     ipvs.Forwarding(d.Forwarding),
			Tunnel:         ipvs.TunnelOptions{Type: ipvs.TunnelType(d.TunnelType), Port: d.TunnelPort, Flags: ipvs.TunnelFlags(d.TunnelFlags)},
			UpperThreshold: d.UpperThreshold, LowerThreshold: d.LowerThreshold,
			ActiveConns: d.ActiveConnections, InactiveConns: d.InactiveConnections})
	}
	return out
}

func snapshotDaemon(d ipvs.Daemon) SnapshotDaemon {
	return SnapshotDaemon{State: d.State.String(), Interface: d.Interface, SyncID: d.SyncID, MaxLen: d.MaxLen,
		Group: d.Group, Port: d.Port, TTL: d.TTL}
}

func (d SnapshotDaemon) daemon() (ipvs.Daemon, error) {
	out := ipvs.Daemon{Interface: d.Interface, SyncID: d.SyncID, MaxLen: d.MaxLen, Group: d.Group, Port: d.Port, TTL: d.TTL}
	switch d.State {
	case "master":
		out.State = ipvs.DaemonMaster
	case "backup":
		out.State = ipvs.DaemonBackup
	default:
		return ipvs.Daemon{}, fmt.Errorf("sync daemon state %q: want master or backup", d.State)
	}
	return out, nil
}

func snapshotTimeouts(t ipvs.Timeouts) *SnapshotTimeouts {
	return &SnapshotTimeouts{TCP: int64(t.TCP / time.Second), TCPFin: int64(t.TCPFin / time.Second), UDP: int64(t.UDP / time.Second)}
}

func (t SnapshotTimeouts) timeouts() ipvs.Timeouts {
	return ipvs.Timeouts{TCP: time.Duration(t.TCP) * time.Second, TCPFin: time.Duration(t.TCPFin) * time.Second,
		UDP: time.Duration(t.UDP) * time.Second}
}
