package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/lvsd/lvsd/agent"
	"github.com/lvsd/lvsd/agent/api"
	"github.com/lvsd/lvsd/agent/config"
	"github.com/lvsd/lvsd/agent/health"
	"github.com/lvsd/lvsd/arp"
	"github.com/lvsd/lvsd/ipvs"
	"github.com/lvsd/lvsd/nat"
)

func init() {
	commands["run"] = command{usage: "run the agent in the foreground (SIGHUP reloads)", run: runAgent}
	commands["check"] = command{usage: "validate the configuration, touch nothing (exit 0 or 1)", run: check}
	commands["plan"] = command{usage: "show what run would change in the kernel now, change nothing", run: plan}
}

func runAgent(ctx context.Context, e *env) error {
	// Catch SIGHUP before anything slow: its default action would kill a
	// process reloaded right after start (systemctl reload).
	reload := make(chan os.Signal, 1)
	signal.Notify(reload, syscall.SIGHUP)
	defer signal.Stop(reload)
	cfg, err := agent.LoadConfig(e.config)
	if err != nil {
		return err
	}
	if cfg.Agent.Role == config.RoleRealServer {
		return runRealServer(ctx, e, cfg.Agent, reload)
	}
	log := newLogger(cfg.Agent, e.stderr)
	k, err := openKernel()
	if err != nil {
		return err
	}
	hints := make(chan struct{}, 1)
	go func() {
		for range reload {
			select {
			case hints <- struct{}{}:
			default:
			}
		}
	}()
	member, err := startCluster(ctx, cfg, &k, log)
	if err != nil {
		return err
	}
	defer member.leave()
	checker := health.NewMonitor(log)
	go checker.Run(ctx)
	opts := agent.Options{ConfigPath: e.config, Config: cfg, Kernel: k, Log: log, Health: checker}
	if member.node != nil { // a nil *cluster.Node in an interface would not be nil
		opts.VIPs, opts.Cluster = member.node, member.node
	}
	if member.relay != nil {
		opts.ConnSync = member.relay
	}
	a := agent.New(opts)
	if err := startMetrics(ctx, cfg, a, log); err != nil {
		return err
	}
	apiL, err := api.Listen(cfg.Agent.APISocket)
	if err != nil {
		return fmt.Errorf("local API socket: %w", err)
	}
	go func() {
		if err := api.Serve(ctx, apiL, a.APIHandler()); err != nil {
			log.Error("local API stopped", "socket", cfg.Agent.APISocket, "err", err)
		}
	}()
	go notifySystemd(ctx, log, directorLiveness(a))
	return a.Run(ctx, hints)
}

func openKernel() (agent.Kernel, error) {
	h, err := ipvs.Open("")
	if err != nil {
		return agent.Kernel{}, err
	}
	return agent.Kernel{
		IPVS:                   h,
		Conns:                  h,
		Addrs:                  arp.Kernel{},
		NAT:                    nat.NewKernel(),
		EnableForwarding:       nat.EnableForwarding,
		EnableIPVSConntrack:    nat.EnableIPVSConntrack,
		DisableRedirects:       nat.DisableRedirects,
		EnableConnectionExpiry: ipvs.EnableConnectionExpiry,
	}, nil
}

func check(_ context.Context, e *env) error {
	cfg, err := agent.LoadConfig(e.config)
	if err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "%s: ok (role %s, %d services, %d IPVS services)\n", e.config, cfg.Agent.Role,
		len(cfg.Services), len(cfg.Desired.Services))
	return nil
}

func plan(ctx context.Context, e *env) error {
	cfg, err := agent.LoadConfig(e.config)
	if err != nil {
		return err
	}
	k, err := openKernel()
	if err != nil {
		return err
	}
	ops, err := agent.PlanFor(ctx, cfg, k)
	if err != nil {
		return err
	}
	if len(ops) == 0 {
		fmt.Fprintln(e.stdout, "no changes: the kernel matches the configuration")
		return nil
	}
	for _, op := range ops {
		fmt.Fprintln(e.stdout, op)
		if op.Kind == agent.ReplaceNAT {
			fmt.Fprint(e.stdout, lines(op.NAT.String()))
		}
	}
	return nil
}
