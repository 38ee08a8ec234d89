package director

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/lvsd/lvsd/agent/planner"

	"github.com/lvsd/lvsd/agent"
	"github.com/lvsd/lvsd/agent/config"
	"github.com/lvsd/lvsd/arp"
	"github.com/lvsd/lvsd/cluster"
	"github.com/lvsd/lvsd/cluster/connsync"
	"github.com/lvsd/lvsd/cluster/identity"
)

// startMember joins the director cluster configured in o.Config and
// returns a zero member without a `cluster:` block (this director holds
// every VIP). In a cluster the VIP addresses go through arp.Leased (set into
// k): with a lifetime renewed while the cluster node runs, so a killed agent's
// VIPs vanish by themselves; the leases announce them too. The relay and the
// leases run on wg until the member's stop.
func startMember(ctx context.Context, o Options, k *agent.Kernel, bgCtx context.Context, wg *sync.WaitGroup) (member, error) {
	cfg, log := o.Config, o.Log
	c := cfg.Agent.Cluster
	if c == nil {
		return member{}, nil
	}
	if o.Leases == nil || o.StartCluster == nil || c.ConnSync.Enabled && o.NewRelay == nil {
		return member{}, errNoConstructor
	}
	if o.RaisePriority != nil {
		if err := o.RaisePriority(c.Nice); err != nil {
			log.Warn("cannot raise the scheduling priority; failure detection may misfire on a loaded host", "nice", c.Nice, "err", err)
		}
	}
	leases := &arp.Leased{Addrs: o.Leases, Announcer: k.Announcer, Lifetime: c.AddressLifetime, Log: log}
	k.Addrs, k.Announcer = leases, leases
	cc := clusterConfig(cfg.Agent, leases.Reannounce, log)
	// A predecessor that stopped under a restart hold left its VIPs for
	// this process to adopt (restarthold.go).
	hold := takeRestartHold(cfg.Agent.StateDir, time.Now(), log)
	if !hold.Until.IsZero() {
		vips, n, err := adoptAddresses(ctx, leases, cfg.Agent.StateDir, hold)
		if err != nil {
			log.Error("adopting the VIP addresses of the previous run", "err", err)
		}
		log.Info("restart hold: adopting the VIPs of the previous run", "vips", len(vips), "addresses", n,
			"hold_left", time.Until(hold.Until).Round(time.Millisecond).String())
		cc.Adopt, cc.AdoptUntil = vips, hold.Until
	} else {
		// A killed predecessor's VIPs may still be on the interface: a
		// cluster director holds nothing until the cluster gives it VIPs,
		// and its peers must not see them here once it is a member.
		stale, err := agent.NewHolder(*k, nil, cfg.Agent.StateDir, log)
		if err == nil {
			err = stale.ReleaseStale(ctx)
		}
		if err != nil {
			log.Error("removing VIP addresses left by a previous run", "err", err)
		}
	}
	cc.Incarnation = nextIncarnation(cfg.Agent.StateDir, time.Now(), log)
	var err error
	if cc.Bind, err = resolveBind(ctx, cc.Bind, cfg, o.Kernel.Addrs, false); err != nil {
		return member{}, err
	}
	node, err := o.StartCluster(cc)
	if err != nil {
		return member{}, err
	}
	m := member{node: node, leases: leases, restarted: !hold.Until.IsZero()}
	runCtx, stop := context.WithCancel(bgCtx)
	var runs sync.WaitGroup
	m.stop = func() { stop(); runs.Wait() }
	if c.ConnSync.Enabled {
		rc := relayConfig(c.ConnSync, node, log)
		rc.Incarnation, rc.Identity = cc.Incarnation, cc.Identity
		if k.Daemons != nil && k.Conns != nil {
			// Writes wait for the backup daemon, and the start-up hold for
			// the others' state in the kernel's table (connsync.Kernel).
			rc.Kernel = agent.SyncBackup{Daemons: k.Daemons, Conns: k.Conns, Port: c.ConnSync.Port + 1}
		}
		if c.Mode == config.ModeECMP && k.Conntrack != nil {
			m.peers = agent.NewPeerFlows(k.Conntrack, k.Sysctls, c.ConnSync.PeerConntrackShare, log)
			rc.Applied = m.peers.Applied
			peers := m.peers
			runs.Go(func() { peers.Run(runCtx) })
		}
		if m.relay, err = o.NewRelay(rc); err != nil {
			m.leave(log, nil)
			return member{}, fmt.Errorf("connection sync: %w", err)
		}
		node.SetSync(m.relay)
		relay := m.relay
		runs.Go(func() {
			if err := relay.Run(runCtx); err != nil {
				log.Error("connection sync relay stopped; connections will not survive a failover", "err", err)
			}
		})
		k.Relay = relay
	}
	if c.ConfigSync {
		if m.config, err = startConfigSync(runCtx, cfg.Agent, node, cc.Identity, &runs, log); err != nil {
			m.leave(log, nil)
			return member{}, fmt.Errorf("config sync: %w", err)
		}
	}
	leases.Keep = node.Healthy
	runs.Go(func() { leases.Run(runCtx) })
	return m, nil
}

// resolveBind fills in the host of a bind without one (cluster.bind unset):
// the director's own address on its interface, IPv4 first (only, with
// v4only), never a VIP or an address that moves with one.
func resolveBind(ctx context.Context, bind string, cfg *agent.LoadedConfig, addrs arp.Addresses, v4only bool) (string, error) {
	host, port, err := net.SplitHostPort(bind)
	if err != nil || host != "" {
		return bind, err
	}
	moving := map[netip.Addr]bool{}
	for _, p := range planner.Addresses(cfg.Desired.VIPs) {
		moving[p.Addr()] = true
	}
	present, err := addrs.List(ctx, cfg.Agent.Interface)
	if err != nil {
		return "", fmt.Errorf("cluster.bind unset: listing the addresses of %s: %w", cfg.Agent.Interface, err)
	}
	var v6 netip.Addr
	for _, p := range present {
		a := p.Addr()
		switch {
		case moving[a] || !a.IsGlobalUnicast() && !a.IsPrivate():
		case a.Is4():
			return net.JoinHostPort(a.String(), port), nil
		case !v6.IsValid():
			v6 = a
		}
	}
	if v6.IsValid() && !v4only {
		return net.JoinHostPort(v6.String(), port), nil
	}
	return "", fmt.Errorf("cluster.bind unset and %s has no address of its own to bind to: set cluster.bind", cfg.Agent.Interface)
}

// clusterConfig maps the agent file's cluster block to the node's config.
func clusterConfig(a *config.Agent, reannounce func(netip.Addr), log *slog.Logger) cluster.Config {
	c := a.Cluster
	keyFile := c.KeyFile
	return cluster.Config{
		Name:              a.Node,
		Rules:             cluster.Rules{Mode: cluster.Mode(c.Mode), Preempt: c.Preempt, Quorum: c.Quorum},
		Priority:          c.Priority,
		Bind:              c.Bind,
		Advertise:         c.Advertise,
		Peers:             c.Peers,
		Label:             c.Label,
		Keys:              c.Keys,
		Insecure:          c.Insecure,
		KeyFile:           keyFile,
		LoadKeys:          func() ([][]byte, error) { return config.ReadKeyFile(keyFile) },
		Identity:          &identity.Keys{Private: c.Identity, Directors: c.Directors},
		HeartbeatInterval: c.HeartbeatInterval,
		FailureTimeout:    c.FailureTimeout,
		RejoinInterval:    c.RejoinInterval,
		Reannounce:        reannounce,
		Log:               log,
	}
}

// relayConfig is the relay of connection sync c: it reads the master
// daemon on lo and feeds the backup daemon (docs/cluster.md, "Connection
// sync"), pushing the master's last record out through the pusher service.
func relayConfig(c config.ConnSync, t connsync.Transport, log *slog.Logger) connsync.Config {
	lo := netip.MustParseAddr("127.0.0.1")
	return connsync.Config{MasterPort: c.Port, BackupPort: c.Port + 1, SyncID: planner.SyncID,
		ResyncInterval: c.ResyncInterval, Transport: t, Log: log,
		Pusher: netip.AddrPortFrom(lo, planner.PusherPort(c))}
}
