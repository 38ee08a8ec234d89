package director

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"sync"
	"time"

	"github.com/lvsd/lvsd/agent"
	"github.com/lvsd/lvsd/agent/config"
	"github.com/lvsd/lvsd/cluster/bfd"
	"github.com/lvsd/lvsd/cluster/bgp"
)

// Speaker is what the director uses of its BGP speaker (bgp.Speaker).
type Speaker interface {
	bgp.Announcer
	// Close withdraws everything, closes the sessions and stops.
	Close(ctx context.Context) error
}

// restartCloser is a Speaker that can stop for a planned restart leaving
// its routes at the routers (bgp.Speaker.CloseForRestart).
type restartCloser interface {
	CloseForRestart(ctx context.Context) error
}

// speakerConfig maps the agent file's bgp block to the speaker's config;
// routerID is the resolved router id, restarting says that the previous
// process stopped under a restart hold.
func speakerConfig(b *config.BGP, routerID netip.Addr, restarting bool, log *slog.Logger) bgp.Config {
	c := bgp.Config{ASN: b.ASN, RouterID: routerID, ListenAddresses: b.ListenAddresses, ListenPort: b.ListenPort,
		NextHop4: b.NextHop4, NextHop6: b.NextHop6, Log: log,
		GracefulRestart: bgp.GracefulRestart{Enabled: b.GracefulRestart, RestartTime: b.RestartTime},
		Restarting:      restarting && b.GracefulRestart}
	for _, p := range b.Peers {
		c.Peers = append(c.Peers, bgp.PeerConfig{Address: p.Address, ASN: p.ASN, Port: p.Port, LocalAddress: p.LocalAddress,
			Password: p.Password, HoldTime: p.HoldTime, KeepaliveInterval: p.Keepalive, ConnectRetry: p.ConnectRetry,
			Families: p.Families, BFD: p.BFD, MaxPrefixes: p.MaxPrefixes,
			BFDTimers: bfd.Timers{DesiredMinTx: p.BFDInterval, RequiredMinRx: p.BFDInterval, DetectMult: uint8(p.BFDMultiplier)}})
	}
	return c
}

// routeTable is the agent's Routes over a speaker: it keeps the routes
// announced and hands the speaker the whole table at each update (the
// speaker diffs it). Only the VIP holder calls it, but the status reads too.
type routeTable struct {
	speaker bgp.Announcer

	mu     sync.Mutex // guards routes
	routes map[netip.Prefix]bgp.Route
}

var _ agent.Routes = (*routeTable)(nil)

func newRouteTable(s bgp.Announcer) *routeTable {
	return &routeTable{speaker: s, routes: map[netip.Prefix]bgp.Route{}}
}

// Update implements agent.Routes.
func (t *routeTable) Update(ctx context.Context, announce []bgp.Route, withdraw []netip.Prefix) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	next := make(map[netip.Prefix]bgp.Route, len(t.routes)+len(announce))
	for p, r := range t.routes {
		next[p] = r
	}
	for _, p := range withdraw {
		delete(next, p)
	}
	for _, r := range announce {
		next[r.Prefix] = r
	}
	all := make([]bgp.Route, 0, len(next))
	for _, r := range next {
		all = append(all, r)
	}
	if err := t.speaker.SetRoutes(ctx, all); err != nil {
		return err
	}
	t.routes = next
	return nil
}

// startSpeaker starts the BGP speaker of the bgp block, if any;
// restarting: the previous process stopped under a restart hold.
func startSpeaker(ctx context.Context, o Options, k agent.Kernel, restarting bool) (Speaker, error) {
	b := o.Config.Agent.BGP
	if b == nil {
		return nil, nil
	}
	if o.StartBGP == nil {
		return nil, fmt.Errorf("a bgp block needs Options.StartBGP")
	}
	id := b.RouterID
	if !id.IsValid() {
		// The director's own IPv4 address, as for the cluster's bind.
		bind, err := resolveBind(ctx, ":0", o.Config, k.Addrs, true)
		if err != nil {
			return nil, fmt.Errorf("bgp: router_id unset: %w", err)
		}
		id = netip.MustParseAddrPort(bind).Addr()
	}
	return o.StartBGP(ctx, speakerConfig(b, id, restarting, o.Log))
}

// stopSpeaker withdraws the director's routes (through the holder, so the
// plan and the log say so), lets the routers move the flows away for the
// stop grace while the VIPs still answer, and stops the speaker. For a
// restart (a restart hold in force, graceful restart on) it withdraws
// nothing: the speaker ends its sessions as a restarting one, and the
// routers keep the path while the kernel forwards.
func stopSpeaker(s Speaker, holder *agent.Holder, grace time.Duration, forRestart bool, log *slog.Logger) {
	if s == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), leaveTimeout+grace)
	defer cancel()
	if rc, ok := s.(restartCloser); ok && forRestart {
		log.Info("restart hold: the routes stay at the routers (BGP graceful restart)")
		if err := rc.CloseForRestart(ctx); err != nil {
			log.Error("stopping the BGP speaker for a restart", "err", err)
		}
		return
	}
	if holder != nil {
		if err := holder.Stop(ctx); err != nil {
			log.Error("withdrawing the routes", "err", err)
		}
		log.Info("routes withdrawn; serving what still arrives for the stop grace", "stop_grace", grace.String())
		time.Sleep(grace)
	}
	if err := s.Close(ctx); err != nil {
		log.Error("stopping the BGP speaker", "err", err)
	}
}
