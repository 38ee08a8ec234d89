package planner

import (
	"net/netip"

	"github.com/lvsd/lvsd/agent/config"
	"github.com/lvsd/lvsd/cluster/connsync/records"
	"github.com/lvsd/lvsd/ipvs/l4"
	ipvs "github.com/lvsd/lvsd/ipvs/spec"
)

const (
	// SyncID marks lvsd's sync datagrams; the backup daemon drops others
	// (e.g. from a keepalived-run master on the same host).
	SyncID = 76
	// SyncInterface is where both sync daemons run: lo keeps the kernel's
	// traffic on this host, and the relay carries it over the cluster.
	SyncInterface = "lo"
	// masterMaxLen is one IPv4 record and the message header: the kernel
	// sends a buffered record only when the next one does not fit (or after
	// its 2 s flush time), so with room for one record every record pushes
	// out the one before it. Measured in the VM: a lone record waits 2.0 s
	// whatever the size; with a steady stream of records, one size = no wait.
	masterMaxLen = 8 + 36
)

// syncDaemons are the kernel's sync daemons of connection sync c: the master
// sends to the conn_sync port on lo, the backup listens on the next one
// (docs/cluster.md, "Connection sync").
func syncDaemons(c config.ConnSync) []ipvs.Daemon {
	return []ipvs.Daemon{
		{State: ipvs.DaemonMaster, Interface: SyncInterface, SyncID: SyncID, MaxLen: masterMaxLen, Group: ipvs.DefaultSyncGroup, Port: c.Port},
		{State: ipvs.DaemonBackup, Interface: SyncInterface, SyncID: SyncID, Group: ipvs.DefaultSyncGroup, Port: c.Port + 1},
	}
}

// PusherPort is the port of the pusher service of connection sync c.
func PusherPort(c config.ConnSync) uint16 { return c.Port + 2 }

// pusherService is the IPVS service the relay sends a datagram to, from a
// new port each time, when the master daemon's records stop coming: its new
// connection's record pushes the master's last one out at once
// (records.Config.Pusher). UDP on 127.0.0.1, the port after the backup
// daemon's, delivered to itself: nothing listens there.
func pusherService(c config.ConnSync) *VirtualService {
	lo := netip.MustParseAddr("127.0.0.1")
	key := ipvs.ServiceKey{Protocol: l4.UDP, Addr: lo, Port: PusherPort(c)}
	return &VirtualService{
		Service:      ipvs.Service{ServiceKey: key, Scheduler: "rr"},
		Name:         "conn-sync-pusher",
		VIP:          lo,
		Internal:     true,
		Destinations: []Destination{{From: &config.Backend{Addr: lo, Weight: 1}, Port: key.Port, Weight: 1, SlotWeight: 1}},
		Forwarding:   ipvs.DirectRoute,
	}
}

// SyncServices lists the IPVS services of d as the connection-sync relay
// checks the records it receives (records.Relay.SetServices): a record is
// applied only if its service and real server are configured here. The
// internal pusher service is left out: no peer's record names it.
func SyncServices(d Desired) []records.Service {
	out := make([]records.Service, 0, len(d.Services))
	for _, vs := range d.Services {
		if vs.Internal {
			continue
		}
		s := records.Service{VIP: vs.VIP, FWMark: vs.FWMark}
		if vs.FWMark == 0 {
			s.VIP, s.Protocol, s.Port = vs.Addr, vs.Protocol, vs.Port
		}
		for _, dst := range vs.Destinations {
			s.Dests = append(s.Dests, netip.AddrPortFrom(dst.Addr(), dst.Port))
		}
		out = append(out, s)
	}
	return out
}
