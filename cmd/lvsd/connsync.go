package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
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
	relay, err := connsync.New(connsync.Config{MasterPort: c.Port, BackupPort: c.Port + 1, SyncID: syncID,
		ResyncInterval: c.ResyncInterval, Transport: node, Log: log})
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
