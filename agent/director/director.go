// Package director assembles and runs a director: the reconciler, the VIP
// holder, health checks, and in a cluster the cluster node, the VIP
// leases and the connection-sync relay, with the local API, /metrics and
// the systemd notifications. cmd/lvsd builds the real adapters (the kernel,
// the cluster's and the relay's constructors) and calls Run; tests pass
// fakes. Run owns every goroutine it starts and stops them in order.
package director

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/lvsd/lvsd/agent"
	"github.com/lvsd/lvsd/agent/api"
	"github.com/lvsd/lvsd/agent/config"
	"github.com/lvsd/lvsd/agent/configsync"
	"github.com/lvsd/lvsd/agent/health"
	"github.com/lvsd/lvsd/agent/hooks"
	"github.com/lvsd/lvsd/agent/metrics"
	"github.com/lvsd/lvsd/agent/sdnotify"
	"github.com/lvsd/lvsd/agent/views"
	"github.com/lvsd/lvsd/arp"
	"github.com/lvsd/lvsd/cluster"
	"github.com/lvsd/lvsd/cluster/bgp"
	"github.com/lvsd/lvsd/cluster/connsync"
	"github.com/prometheus/client_golang/prometheus"
)

// Options are what a director runs with. Config, Kernel and Log are
// required; the constructors are required only in a cluster.
type Options struct {
	ConfigPath string
	Config     *agent.LoadedConfig
	Version    string
	Log        *slog.Logger
	// Kernel is the host. Its Addrs are plain addresses: in a cluster Run
	// wraps Leases around them.
	Kernel agent.Kernel
	// Leases are the addresses with lifetimes a cluster director holds its
	// VIPs with (arp.Kernel); required in a cluster.
	Leases arp.ExpiringAddresses
	// Links follows the state of the director's interface (arp.Kernel):
	// while it is down the director gives its VIPs up. nil: not followed.
	Links arp.LinkWatcher
	// StartCluster joins the director cluster (cluster.Start).
	StartCluster func(cluster.Config) (Node, error)
	// StartVRRP starts a VRRP virtual router of mode vrrp (vrrp.Listen),
	// which runs until ctx ends or its Stop.
	StartVRRP func(context.Context, VRRPRouter) (Router, error)
	// NewRelay makes the connection-sync relay (connsync.New).
	NewRelay func(connsync.Config) (Relay, error)
	// StartBGP starts the BGP speaker of a bgp block (bgp.Start with a
	// bfd.Server for the peers with BFD).
	StartBGP func(context.Context, bgp.Config) (Speaker, error)
	// RaisePriority gives this process the scheduling priority nice
	// (cluster.RaisePriority); nil: unchanged.
	RaisePriority func(nice int) error
	// Notifier speaks sd_notify; nil: no service manager.
	Notifier sdnotify.Notifier
	// Reload delivers a value for every reload request: SIGHUP, which
	// cmd/lvsd subscribes to with signal.Notify.
	Reload <-chan os.Signal
}

// Node is what the director uses of its cluster node (cluster.Node).
type Node interface {
	agent.VIPOwnership
	agent.ClusterViewer
	connsync.Transport
	HealthVoter
	agent.ConfigAdvertiser
	SetSync(cluster.SyncReceiver)
	// Healthy reports whether the node runs and checks its peers: VIP
	// leases are renewed only while it does.
	Healthy() bool
	// Leave hands this director's VIPs over (release removes the
	// addresses) and leaves the cluster; under a restart hold it keeps
	// them.
	Leave(ctx context.Context, release func(context.Context) error) error
	// HoldForRestart asks the peers to keep this director's VIPs where
	// they are for d: it is about to restart (0 ends a hold).
	HoldForRestart(ctx context.Context, d time.Duration) (cluster.RestartHold, error)
}

// Relay is what the director uses of the connection-sync relay
// (connsync.Relay).
type Relay interface {
	agent.ConnSync
	cluster.SyncReceiver
	Run(ctx context.Context) error
}

// leaveTimeout bounds handing the VIPs over at shutdown.
const leaveTimeout = 5 * time.Second

// Run runs the director until ctx ends, then stops in order: the
// reconciler and the VIP holder first, then it leaves the cluster (its VIP
// addresses go, the peers take over at once), then the relay and the rest.
// The kernel's IPVS and nftables state stays, so a restart costs no
// connection. When a step of the start fails, what the steps before it
// started stops, in reverse order, before Run returns the error.
func Run(ctx context.Context, o Options) error {
	cfg := o.Config
	log := o.Log
	var bg sync.WaitGroup // everything that runs until the very end
	bgCtx, stopBackground := context.WithCancel(context.WithoutCancel(ctx))
	defer func() { stopBackground(); bg.Wait() }()

	checker := health.NewMonitor(log, health.WithMaxInFlight(cfg.Agent.HealthMaxInFlight))
	events := newHooks(cfg, log)
	bg.Go(func() { events.Run(bgCtx) })
	k := o.Kernel
	k.Log = log
	if cfg.Agent.Cluster == nil {
		k.Announcer = nil // a director alone: its VIPs never move
	}
	// What started and must stop if a later step fails, in reverse order
	// (the normal stop, below, stops them in its own way).
	var started []func()
	fail := func(err error) error {
		for i := len(started) - 1; i >= 0; i-- {
			started[i]()
		}
		return err
	}
	var m member
	var err error
	if c := cfg.Agent.Cluster; c != nil && c.Mode == config.ModeVRRP {
		m, err = startVRRP(ctx, o, &k, bgCtx)
	} else {
		m, err = startMember(ctx, o, &k, bgCtx, &bg)
	}
	if err != nil {
		return err
	}
	started = append(started, func() { m.leave(log, nil) })
	speaker, err := startSpeaker(ctx, o, k, m.restarted)
	if err != nil {
		return fail(err)
	}
	if speaker != nil {
		started = append(started, func() { stopSpeaker(speaker, nil, 0, false, log) })
		k.Routes = newRouteTable(speaker)
	}
	var checks agent.HealthChecker = checker
	if v := newVotedHealth(cfg, m.node, checker, log); v != nil {
		bg.Go(func() { v.run(bgCtx) })
		checks = v
	}
	holder, err := agent.NewHolder(k, m.vips(), cfg.Agent.StateDir, log)
	if err != nil {
		return fail(fmt.Errorf("reading the address record: %w", err))
	}
	holder.SetEvents(events)
	trackLink(bgCtx, o.Links, holder, cfg.Agent.Interface, log)
	if o.Links != nil {
		holder.TrackInterfaces(bgCtx, o.Links)
	}
	trackUpstream(bgCtx, &bg, cfg.Agent.Track, holder, log)
	opts := agent.Options{ConfigPath: o.ConfigPath, Config: cfg, Kernel: k, Log: log, Health: checks, Holder: holder,
		Events: events}
	if speaker != nil {
		opts.BGP = speaker
	}
	if m.node != nil {
		opts.Cluster, opts.ConfigDigest = m.node, m.node
		if agreement, ok := m.node.(agent.ConfigAgreement); ok {
			opts.ConfigAgreement = agreement
		}
	}
	if m.relay != nil {
		opts.ConnSync = m.relay
	}
	opts.PeerFlows = m.peers
	a := agent.New(opts)
	bg.Go(func() { runChecksAfterStart(bgCtx, checker, a, log) })
	if m.config != nil {
		m.config.SetReload(func(ctx context.Context) { _, _ = a.RequestReload(ctx) })
	}
	if err := serve(bgCtx, &bg, cfg, a, m, events, NewHealthMetrics(checker), o.Version, log); err != nil {
		return fail(err)
	}
	if o.Notifier != nil {
		bg.Go(func() { sdnotify.Run(bgCtx, log, o.Notifier, liveness(a)) })
	}

	agentCtx, stopAgent := context.WithCancel(ctx)
	holderStopped := holder.Start(agentCtx)
	err = a.Run(agentCtx, o.Reload)
	stopAgent()
	holderStopped()
	if speaker != nil {
		b := cfg.Agent.BGP
		forRestart := b.GracefulRestart && restartHoldInForce(cfg.Agent.StateDir, time.Now())
		stopSpeaker(speaker, holder, b.StopGrace, forRestart, log)
	}
	m.leave(log, holder.Release)
	return err
}

// member is this director's part in the cluster; zero without one.
type member struct {
	node    Node
	vrrp    agent.VIPOwnership // mode vrrp: the virtual routers, in place of node
	routers vrrpRouters        // mode vrrp: the same, for the status
	relay   Relay
	leases  *arp.Leased
	peers   *agent.PeerFlows   // under ECMP with connection sync: other directors' FULLNAT flows
	config  *configsync.Syncer // cluster.config_sync
	stop    func()             // stops the relay and the leases once the cluster is left
	// restarted: the previous process stopped under a restart hold,
	// which is still running.
	restarted bool
}

func (m member) vips() agent.VIPOwnership {
	if m.vrrp != nil {
		return m.vrrp
	}
	if m.node == nil {
		return nil
	}
	return m.node
}

// viewSources are m's parts that the status and the metrics show beside
// the agent's.
func (m member) viewSources() views.Sources {
	var src views.Sources
	if len(m.routers) > 0 {
		src.VRRP = m.routers.status
	}
	if m.config != nil {
		src.ConfigSync = configSyncView(m.config)
	}
	return src
}

// leave hands the VIPs over (release removes their addresses) and stops
// what runs for the cluster.
func (m member) leave(log *slog.Logger, release func(context.Context) error) {
	if m.vrrp != nil {
		// The addresses go first, then priority 0 tells the backup to take
		// over within its skew time: the VIP is never on both directors,
		// at the cost of the time the removal takes.
		if release != nil {
			ctx, cancel := context.WithTimeout(context.Background(), leaveTimeout)
			defer cancel()
			if err := release(ctx); err != nil {
				log.Error("removing the VIP addresses", "err", err)
			}
		}
		m.stop()
		return
	}
	if m.node == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), leaveTimeout)
	defer cancel()
	if err := m.node.Leave(ctx, release); err != nil {
		log.Error("leaving the cluster", "err", err)
	}
	m.stop()
}

// serve starts the local API and /metrics: the views of a (agent/views).
func serve(ctx context.Context, wg *sync.WaitGroup, cfg *agent.LoadedConfig, a *agent.Agent, m member, events *hooks.Runner, checks HealthMetrics,
	version string, log *slog.Logger) error {
	v := views.NewWith(a, m.viewSources())
	l, err := api.Listen(cfg.Agent.APISocket)
	if err != nil {
		return fmt.Errorf("local API socket: %w", err)
	}
	h := serveConfigSync(serveRestartHold(v.APIHandler(), m, cfg.Agent.Node, cfg.Agent.StateDir), m.config, cfg.Agent.Node)
	wg.Go(func() {
		if err := api.Serve(ctx, l, api.WithProfiling(h)); err != nil {
			log.Error("local API stopped", "socket", cfg.Agent.APISocket, "err", err)
		}
	})
	if ro := cfg.Agent.ReadOnlyAPI; ro != nil {
		rl, err := api.ListenGroup(ro.Socket, ro.GID)
		if err != nil {
			return fmt.Errorf("read-only API socket: %w", err)
		}
		wg.Go(func() {
			if err := api.Serve(ctx, rl, api.ReadOnly(v.APIHandler())); err != nil {
				log.Error("read-only API stopped", "socket", ro.Socket, "err", err)
			}
		})
	}
	if ml := metrics.Listen(cfg.Agent.MetricsListen, log); ml != nil {
		cs := []prometheus.Collector{views.NewCollector(v, version), checks}
		if events != nil {
			cs = append(cs, events)
		}
		wg.Go(func() { metrics.Serve(ctx, ml, log, cs...) })
	}
	return nil
}

// firstPassPoll is how often runChecksAfterStart looks whether the first
// reconcile pass has finished.
const firstPassPoll = 100 * time.Millisecond

// runChecksAfterStart runs the health checks from the end of the first
// reconcile pass until ctx ends. Backends count as healthy until their
// first round (as down with initial: down) whether the checks run or not,
// so the first pass loses nothing by not waiting; and checks that start
// with it would compete with it for the CPU: with 100,000 targets on a
// slow host, for minutes. The checks then begin spread over their
// intervals.
func runChecksAfterStart(ctx context.Context, checker *health.Monitor, a *agent.Agent, log *slog.Logger) {
	tick := time.NewTicker(firstPassPoll)
	defer tick.Stop()
	for {
		if _, ok := a.Reconciles(); ok {
			break
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
	st := checker.Stats()
	log.Info("health checks started", "event", "health_start", "targets", st.Targets, "max_in_flight", st.MaxInFlight)
	checker.Run(ctx)
}

// liveness: ready after the first reconcile pass, wedged when the
// reconcile loop stopped passing (agent.Stalled).
func liveness(a *agent.Agent) sdnotify.Liveness {
	return func(now time.Time) (bool, string, error) {
		st, ok := a.Reconciles()
		if !ok {
			return false, "first reconcile pass", nil
		}
		end := st.Last.Add(st.LastDuration)
		if a.Stalled(now) {
			return true, "", fmt.Errorf("no reconcile pass finished since %s", end.Format(time.RFC3339))
		}
		line := fmt.Sprintf("%d IPVS services; last pass at %s ok", st.Services, end.Format(time.TimeOnly))
		if st.LastError != "" {
			line = fmt.Sprintf("%d IPVS services; last pass at %s FAILED (lvsd status; journalctl -u lvsd)",
				st.Services, end.Format(time.TimeOnly))
		}
		return true, line, nil
	}
}

// trackLink makes the holder follow the state of the director's interface
// until ctx ends. Failing to watch it is no reason not to run: the
// director then serves as if the link were always up.
func trackLink(ctx context.Context, links arp.LinkWatcher, holder *agent.Holder, dev string, log *slog.Logger) {
	if links == nil {
		return
	}
	states, err := links.WatchLink(ctx, dev)
	if err != nil {
		log.Error("cannot follow the interface's state; its VIPs stay even when it goes down", "interface", dev, "err", err)
		return
	}
	holder.TrackLink(states)
}

// newHooks returns the runner of the agent file's event hooks; nil
// without any. They are read at start: a change takes a restart.
func newHooks(cfg *agent.LoadedConfig, log *slog.Logger) *hooks.Runner {
	h := cfg.Agent.Hooks
	if h == nil {
		return nil
	}
	return hooks.New(hooks.Config{Node: cfg.Agent.Node, Timeout: h.Timeout, LaxModes: cfg.Agent.LaxModes,
		Programs: map[hooks.Kind]string{hooks.Ownership: h.OnOwnership, hooks.Health: h.OnHealth}}, log)
}

var errNoConstructor = errors.New("a cluster needs Options.Leases, StartCluster and (with conn_sync) NewRelay")
