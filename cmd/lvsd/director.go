package main

import (
	"context"
	"errors"
	"net/netip"
	"os"
	"os/signal"
	"slices"
	"syscall"
	"time"

	"github.com/coreos/go-systemd/v22/daemon"
	"github.com/spf13/cobra"

	"github.com/lvsd/lvsd/agent"
	"github.com/lvsd/lvsd/agent/config"
	"github.com/lvsd/lvsd/agent/director"
	"github.com/lvsd/lvsd/agent/logging"
	"github.com/lvsd/lvsd/agent/realserver"
	"github.com/lvsd/lvsd/arp"
	"github.com/lvsd/lvsd/arp/sysctl"
	"github.com/lvsd/lvsd/cluster"
	"github.com/lvsd/lvsd/cluster/bfd"
	"github.com/lvsd/lvsd/cluster/bgp"
	"github.com/lvsd/lvsd/cluster/connsync"
	"github.com/lvsd/lvsd/cluster/vrrp"
	"github.com/lvsd/lvsd/ipvs"
	"github.com/lvsd/lvsd/nat"
	"github.com/lvsd/lvsd/nat/toa"
)

func init() {
	subcommands = append(subcommands, func() *cobra.Command {
		return &cobra.Command{Use: "run", Short: "run the agent in the foreground (SIGHUP reloads)",
			Args: argCount(0, 0), ValidArgsFunction: cobra.NoFileCompletions, RunE: action(runAgent)}
	})
}

func runAgent(ctx context.Context, e *env) error {
	// Catch SIGHUP before anything slow: its default action would kill a
	// process reloaded right after start (systemctl reload). One pending
	// signal is enough: a reload reads every file anyway.
	reload := make(chan os.Signal, 1)
	signal.Notify(reload, syscall.SIGHUP)
	defer signal.Stop(reload)
	cfg, err := agent.LoadConfigOnHost(e.config, admitOnHost(ctx))
	if err != nil {
		return err
	}
	log := logging.New(e.stderr, cfg.Agent.LogLevel, cfg.Agent.LogFormat) // first: it also routes what libraries log
	for _, w := range cfg.Agent.Warnings() {
		log.Warn(w)
	}
	if cfg.Agent.Role == config.RoleRealServer {
		return realserver.Run(ctx, realserver.RunOptions{ConfigPath: e.config, Config: cfg.Agent, Version: version, Log: log,
			Host: realServerHost(), Notifier: systemd{}, Reload: reload})
	}
	k, err := openKernel()
	if err != nil {
		return err
	}
	// A test knob, not for operators: the VM tests make the backup
	// daemon slow to start (agent.SlowBackupStart).
	if d, err := time.ParseDuration(os.Getenv("LVSD_TEST_BACKUP_DAEMON_DELAY")); err == nil && d > 0 {
		k.Daemons = &agent.SlowBackupStart{SyncDaemons: k.Daemons, Delay: d}
	}
	return director.Run(ctx, director.Options{
		ConfigPath: e.config, Config: cfg, Version: version, Log: log,
		Kernel: k, Leases: arp.Kernel{}, Links: arp.Kernel{},
		StartCluster: func(c cluster.Config) (director.Node, error) { return cluster.Start(c) },
		NewRelay:     func(c connsync.Config) (director.Relay, error) { return connsync.New(c) },
		StartVRRP: func(ctx context.Context, r director.VRRPRouter) (director.Router, error) {
			return vrrp.Listen(ctx, r.Interface, r.IPv6, r.IsVIP, r.Config)
		},
		StartBGP:      startBGP,
		RaisePriority: cluster.RaisePriority,
		Notifier:      systemd{},
		Reload:        reload,
	})
}

// startBGP starts the BGP speaker, with a BFD server when a peer uses BFD.
func startBGP(ctx context.Context, c bgp.Config) (director.Speaker, error) {
	var srv *bfd.Server
	if slices.ContainsFunc(c.Peers, func(p bgp.PeerConfig) bool { return p.BFD }) {
		var err error
		if srv, err = bfd.Start(bfd.Config{Log: c.Log.With("component", "bfd")}); err != nil {
			return nil, err
		}
		c.BFD = srv
	}
	s, err := bgp.Start(ctx, c)
	if err != nil {
		if srv != nil {
			srv.Close(ctx)
		}
		return nil, err
	}
	return speakerWithBFD{s, srv}, nil
}

// speakerWithBFD stops the BFD server after the speaker (which takes its
// sessions down administratively first).
type speakerWithBFD struct {
	*bgp.Speaker
	bfd *bfd.Server
}

func (s speakerWithBFD) Close(ctx context.Context) error {
	err := s.Speaker.Close(ctx)
	if s.bfd != nil {
		err = errors.Join(err, s.bfd.Close(ctx))
	}
	return err
}

// CloseForRestart is Close for a planned restart (bgp.Speaker.CloseForRestart).
func (s speakerWithBFD) CloseForRestart(ctx context.Context) error {
	err := s.Speaker.CloseForRestart(ctx)
	if s.bfd != nil {
		err = errors.Join(err, s.bfd.Close(ctx))
	}
	return err
}

// systemd is sd_notify through go-systemd.
type systemd struct{}

func (systemd) Notify(state string) (bool, error) { return daemon.SdNotify(false, state) }
func (systemd) Watchdog() time.Duration           { d, _ := daemon.SdWatchdogEnabled(false); return d }

// openKernel builds the director's host adapters on the real kernel.
func openKernel() (agent.Kernel, error) {
	h, err := ipvs.Open("")
	if err != nil {
		return agent.Kernel{}, err
	}
	n := nat.NewKernel()
	return agent.Kernel{IPVS: h, Daemons: h, Conns: h, Timeouts: h, NAT: n, Conntrack: n, Sysctls: sysctl.ProcSys{},
		Addrs: arp.Kernel{}, Announcer: &arp.Gratuitous{}, IPVSWriters: ipvs.Writers,
		TOA: toa.NewOnDemandDirector(toa.DirectorOptions{})}, nil
}

// admitOnHost finds the cluster port's default allow set on this host.
func admitOnHost(ctx context.Context) agent.Admit {
	return func(a *config.Agent) []netip.Prefix {
		return cluster.DefaultSources(ctx, a.Cluster.Bind, a.Interface, a.Cluster.Peers)
	}
}
