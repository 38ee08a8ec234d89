package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"time"

	"github.com/lvsd/lvsd/agent/config"
	"github.com/lvsd/lvsd/cluster"
	"github.com/lvsd/lvsd/cluster/connsync"
	"github.com/lvsd/lvsd/ipvs"
)

const (
	// syncID marks lvsd's sync datagrams; the backup daemon drops others
	// (e.g. from a keepalived-run master on the same host).
	syncID = 76
	// masterMaxLen is one IPv4 record and the message header: the kernel
	// sends a buffered record only when the next one does not fit (or after
	// its 2 s flush time), so with room for one record every record pushes
	// out the one before it. Measured in the VM: a lone record waits 2.0 s
	// whatever the size; with a steady stream of records, one size = no wait.
	masterMaxLen = 8 + 36
	// daemonCheck is how often the sync daemons are checked and restarted
	// when someone stopped them.
	daemonCheck = 30 * time.Second
)

// startConnSync runs the kernel's sync daemons on lo and the relay that carries their datagrams over the cluster
// (docs/cluster.md, "Connection sync"). The relay runs until ctx ends.
func startConnSync(ctx context.Context, c config.ConnSync, h ipvs.Interface, node *cluster.Node, log *slog.Logger) (*connsync.Relay, error) {
	daemons, ok := h.(ipvs.SyncDaemons)
	if !ok {
		return nil, errors.New("connection sync: this IPVS handle cannot run sync daemons")
	}
	want := []ipvs.Daemon{
		{State: ipvs.DaemonMaster, Interface: connsync.DefaultInterface, SyncID: syncID, MaxLen: masterMaxLen, Port: c.Port},
		{State: ipvs.DaemonBackup, Interface: connsync.DefaultInterface, SyncID: syncID, Port: c.Port + 1},
	}
	if err := ensureDaemons(ctx, daemons, want, log); err != nil {
		return nil, err
	}
	pusher := pusherService(c)
	if err := ensurePusher(ctx, h, pusher); err != nil {
		// Only young connections lose: their record may wait 2 s.
		log.Warn("connection sync: no pusher service; a lone sync record may wait up to 2 s", "err", err)
		pusher = ipvs.Service{}
	}
	relay, err := connsync.New(connsync.Config{MasterPort: c.Port, BackupPort: c.Port + 1, SyncID: syncID,
		ResyncInterval: c.ResyncInterval, Transport: node, Log: log,
		Pusher: netip.AddrPortFrom(pusher.Addr, pusher.Port)})
	if err != nil {
		return nil, err
	}
	node.SetSync(relay)
	go func() {
		if err := relay.Run(ctx); err != nil {
			log.Error("connection sync relay stopped; connections will not survive a failover", "err", err)
		}
	}()
	go func() {
		t := time.NewTicker(daemonCheck)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				if err := ensureDaemons(ctx, daemons, want, log); err != nil {
					log.Error("connection sync daemons", "err", err)
				}
				if pusher.Addr.IsValid() {
					if err := ensurePusher(ctx, h, pusher); err != nil {
						log.Error("connection sync pusher service", "err", err)
					}
				}
			}
		}
	}()
	return relay, nil
}

// ensureDaemons starts the sync daemons that are not running as wanted.
func ensureDaemons(ctx context.Context, daemons ipvs.SyncDaemons, want []ipvs.Daemon, log *slog.Logger) error {
	for _, d := range want {
		act, err := daemons.StartDaemon(ctx, d)
		if err != nil {
			return fmt.Errorf("connection sync: starting the %s: %w", d, err)
		}
		if act != ipvs.DaemonUnchanged {
			log.Info("connection sync daemon "+act.String(), "daemon", d.String())
		}
	}
	return nil
}

// pusherService is the IPVS service the relay sends a datagram to, from a
// new port each time, when the master daemon's records stop coming: its
// new connection's record pushes the master's last one out at once
// (connsync.Config.Pusher). UDP on 127.0.0.1, the port after the backup
// daemon's, delivered to itself: nothing listens there.
func pusherService(c config.ConnSync) ipvs.Service {
	lo := netip.MustParseAddr("127.0.0.1")
	return ipvs.Service{ServiceKey: ipvs.ServiceKey{Protocol: ipvs.UDP, Addr: lo, Port: c.Port + 2}, Scheduler: "rr"}
}

// ensurePusher adds the pusher service and its one destination unless they
// exist.
func ensurePusher(ctx context.Context, h ipvs.Interface, svc ipvs.Service) error {
	if err := h.AddService(ctx, svc); err != nil && !errors.Is(err, ipvs.ErrExists) {
		return fmt.Errorf("adding %s: %w", svc.ServiceKey, err)
	}
	dst := ipvs.Destination{DestinationKey: ipvs.DestinationKey{Addr: svc.Addr, Port: svc.Port}, Weight: 1, Forwarding: ipvs.DirectRoute}
	if err := h.AddDestination(ctx, svc.ServiceKey, dst); err != nil && !errors.Is(err, ipvs.ErrExists) {
		return fmt.Errorf("adding %s to %s: %w", dst.DestinationKey, svc.ServiceKey, err)
	}
	return nil
}
