package main

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"strconv"
	"time"

	"golang.org/x/sys/unix"

	"github.com/lvsd/lvsd/agent"
	"github.com/lvsd/lvsd/agent/config"
	"github.com/lvsd/lvsd/arp"
	"github.com/lvsd/lvsd/cluster"
	"github.com/lvsd/lvsd/cluster/connsync"
	"github.com/lvsd/lvsd/ipvs"
)

// clusterMember is this director's part in the cluster.
type clusterMember struct {
	node  *cluster.Node   // who holds which VIP
	relay *connsync.Relay // nil: connection sync is off
	leave func()          // leaves the cluster once the agent has stopped
}

// startCluster joins the director cluster configured in cfg. Without a
// `cluster:` block it returns a zero member: this director holds every VIP.
//
// In a cluster the VIP addresses are added through arp.Leased (set into k):
// with a lifetime renewed while this process runs, announced after each
// add, and reported to the cluster node, which claims a VIP until its
// address is gone.
func startCluster(ctx context.Context, cfg *agent.Config, k *agent.Kernel, log *slog.Logger) (clusterMember, error) {
	c := cfg.Agent.Cluster
	if c == nil {
		return clusterMember{leave: func() {}}, nil
	}
	if fi, err := os.Stat(c.KeyFile); err == nil && fi.Mode().Perm()&0o077 != 0 {
		log.Warn("the cluster key file is readable by other users; make it 0600", "key_file", c.KeyFile,
			"mode", fmt.Sprintf("%04o", fi.Mode().Perm()))
	}
	if err := raisePriority(c.Nice); err != nil {
		log.Warn("cannot raise the scheduling priority; failure detection may misfire on a loaded host", "nice", c.Nice, "err", err)
	}
	var addrs []netip.Addr // the VIPs and the addresses moving with them
	var vips []netip.Addr
	for _, s := range cfg.Services {
		vips = append(vips, s.VIP)
		addrs = append(addrs, s.Addresses()...)
	}
	leases := &arp.Leased{Addrs: arp.Kernel{}, Announcer: &arp.Gratuitous{}, Lifetime: c.AddressLifetime, Log: log}
	// A killed predecessor's VIPs may still be on the interface: this
	// director holds nothing until the cluster gives it VIPs.
	if err := leases.RemoveStale(ctx, cfg.Agent.Interface, addrs); err != nil {
		log.Error("removing VIP addresses left by a previous run", "err", err)
	}
	keyFile := c.KeyFile
	node, err := cluster.Start(cluster.Config{
		Name:              cfg.Agent.Node,
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
		HeartbeatInterval: c.HeartbeatInterval,
		FailureTimeout:    c.FailureTimeout,
		RejoinInterval:    c.RejoinInterval,
		VIPs:              vips,
		// The agent asks about every configured VIP at least every resync.
		VIPExpiry:  3 * agent.DefaultResync,
		Reannounce: leases.Reannounce,
		Log:        log,
	})
	if err != nil {
		return clusterMember{}, err
	}
	// The relay and the leases run until the cluster is left, after the
	// agent has stopped.
	bg, stopBackground := context.WithCancel(context.Background())
	leave := func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := node.Leave(ctx, leases.ReleaseAll); err != nil {
			log.Error("leaving the cluster", "err", err)
		}
		stopBackground()
	}
	// sloppy_tcp lets a new owner pick up connections from their next
	// packet, with or without sync; the sync thresholds matter only with it.
	if err := ipvs.ApplySyncSysctls(ctx, ipvs.RecommendedSyncSysctls()); err != nil {
		if c.ConnSync.Enabled {
			leave()
			return clusterMember{}, fmt.Errorf("connection sync: %w", err)
		}
		log.Warn("cannot set the IPVS sysctls a takeover needs; connections may reset when a VIP moves", "err", err)
	}
	var relay *connsync.Relay
	if c.ConnSync.Enabled {
		if relay, err = startConnSync(bg, c.ConnSync, k.IPVS, node, log); err != nil {
			leave()
			return clusterMember{}, err
		}
		authorizeConnSync(bg, cfg, relay, log) // wiring: moves to agent/director
	}
	leases.OnChange = func(addr netip.Addr, present bool) {
		node.AddressChanged(addr, present)
		if !present && relay != nil {
			relay.ReleaseVIP(addr) // its cached connections are the new holder's to send now
		}
	}
	leases.Keep = node.Healthy
	go leases.Run(bg)
	k.Addrs, k.NAT = withFullNATRestore(k, cfg.Desired.NAT, leases, log)
	return clusterMember{node: node, relay: relay, leave: leave}, nil
}

// raisePriority lowers the nice value of every thread of this process to
// nice (threads created later inherit it from the thread that creates
// them).
// A director in a cluster must answer heartbeats in time on a loaded host,
// as keepalived's vrrp_priority does for VRRP.
func raisePriority(nice int) error {
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return err
	}
	for _, t := range tasks {
		tid, err := strconv.Atoi(t.Name())
		if err != nil {
			continue
		}
		// The raw getpriority returns 20 - nice. Never lower a priority
		// the service manager set higher (e.g. systemd's Nice=).
		if prio, err := unix.Getpriority(unix.PRIO_PROCESS, tid); err == nil && 20-prio <= nice {
			continue
		}
		if err := unix.Setpriority(unix.PRIO_PROCESS, tid, nice); err != nil {
			return fmt.Errorf("setting nice %d: %w", nice, err)
		}
	}
	return nil
}
