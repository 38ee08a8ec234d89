package main

// wiring: moves to agent/director. The relay applies records only of the
// services configured here (connsync.Relay.SetServices); the agent's
// configuration load is where this belongs. Until then this file gives the
// relay the services at start and again when the configuration files
// change (checked every configPoll), and the relay asks the cluster node
// (its transport) who holds which VIP by itself.

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"time"

	"github.com/lvsd/lvsd/agent"
	"github.com/lvsd/lvsd/cluster/connsync"
)

const configPoll = 2 * time.Second

// authorizeConnSync keeps relay's configured services in step with the
// configuration files until ctx ends.
func authorizeConnSync(ctx context.Context, cfg *agent.Config, relay *connsync.Relay, log *slog.Logger) {
	relay.SetServices(syncServices(cfg.Desired))
	go func() {
		seen := configStamp(cfg)
		t := time.NewTicker(configPoll)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			if stamp := configStamp(cfg); stamp != seen {
				seen = stamp
				if c, err := agent.LoadConfig(cfg.Agent.File); err == nil {
					relay.SetServices(syncServices(c.Desired)) // an invalid edit keeps the last good services, as the agent does
					log.Debug("connection sync: configured services reloaded", "services", len(c.Desired.Services))
				}
			}
		}
	}()
}

// syncServices lists the IPVS services of d as the relay checks records.
func syncServices(d agent.Desired) []connsync.Service {
	out := make([]connsync.Service, 0, len(d.Services))
	for _, vs := range d.Services {
		s := connsync.Service{VIP: vs.VIP, FWMark: vs.FWMark}
		if vs.FWMark == 0 {
			s.VIP, s.Protocol, s.Port = vs.Addr, uint8(vs.Protocol), vs.Port
		}
		for _, dst := range vs.Destinations {
			s.Dests = append(s.Dests, netip.AddrPortFrom(dst.Addr, dst.Port))
		}
		out = append(out, s)
	}
	return out
}

// configStamp changes when the agent file or a file in the services
// directory changes.
func configStamp(cfg *agent.Config) string {
	stamp := ""
	if fi, err := os.Stat(cfg.Agent.File); err == nil {
		stamp = fmt.Sprint(fi.ModTime().UnixNano(), fi.Size())
	}
	entries, _ := os.ReadDir(cfg.Agent.ServicesDir)
	for _, e := range entries {
		if fi, err := e.Info(); err == nil {
			stamp += fmt.Sprint(" ", e.Name(), fi.ModTime().UnixNano(), fi.Size())
		}
	}
	return stamp
}
