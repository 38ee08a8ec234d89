// Command lvsd is the LVS director and real-server agent. This file only
// parses the command line and wires the real kernel adapters into agent.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/lvsd/lvsd/agent"
	"github.com/lvsd/lvsd/agent/config"
	"github.com/lvsd/lvsd/arp"
	"github.com/lvsd/lvsd/ipvs"
	"github.com/lvsd/lvsd/nat"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

const defaultConfig = "/etc/lvsd/lvsd.yaml"

const usage = `lvsd — LVS director agent

Usage:
  lvsd run   [--config FILE]   run the agent in the foreground
  lvsd check [--config FILE]   validate the configuration, touch nothing (exit 0 or 1)
  lvsd plan  [--config FILE]   show what run would change in the kernel now
  lvsd version
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "lvsd:", err)
		}
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return flag.ErrHelp
	}
	cmd, args := args[0], args[1:]
	fs := flag.NewFlagSet("lvsd "+cmd, flag.ContinueOnError)
	fs.SetOutput(stderr)
	cfgPath := fs.String("config", defaultConfig, "agent configuration file")
	if err := fs.Parse(args); err != nil {
		return err
	}
	switch cmd {
	case "run":
		return runAgent(ctx, *cfgPath, stderr)
	case "check":
		return check(*cfgPath, stdout)
	case "plan":
		return plan(ctx, *cfgPath, stdout)
	case "version":
		fmt.Fprintln(stdout, "lvsd", version)
		return nil
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return nil
	}
	fmt.Fprint(stderr, usage)
	return fmt.Errorf("unknown command %q", cmd)
}

func runAgent(ctx context.Context, cfgPath string, stderr io.Writer) error {
	// Catch SIGHUP before anything slow: its default action would kill a
	// process reloaded right after start (systemctl reload).
	reload := make(chan os.Signal, 1)
	signal.Notify(reload, syscall.SIGHUP)
	defer signal.Stop(reload)
	cfg, err := agent.LoadConfig(cfgPath)
	if err != nil {
		return err
	}
	log := newLogger(cfg.Agent, stderr)
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
	a := agent.New(agent.Options{ConfigPath: cfgPath, Config: cfg, Kernel: k, Log: log})
	return a.Run(ctx, hints)
}

func openKernel() (agent.Kernel, error) {
	h, err := ipvs.Open("")
	if err != nil {
		return agent.Kernel{}, err
	}
	return agent.Kernel{
		IPVS:                h,
		Addrs:               arp.Kernel{},
		NAT:                 nat.NewKernel(),
		EnableForwarding:    nat.EnableForwarding,
		EnableIPVSConntrack: nat.EnableIPVSConntrack,
	}, nil
}

func check(cfgPath string, stdout io.Writer) error {
	cfg, err := agent.LoadConfig(cfgPath)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%s: ok (role %s, %d services, %d IPVS services)\n", cfgPath, cfg.Agent.Role,
		len(cfg.Services), len(cfg.Desired.Services))
	return nil
}

func plan(ctx context.Context, cfgPath string, stdout io.Writer) error {
	cfg, err := agent.LoadConfig(cfgPath)
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
		fmt.Fprintln(stdout, "no changes: the kernel matches the configuration")
		return nil
	}
	for _, op := range ops {
		fmt.Fprintln(stdout, op)
	}
	return nil
}

func newLogger(a *config.Agent, w io.Writer) *slog.Logger {
	var level slog.Level
	_ = level.UnmarshalText([]byte(a.LogLevel))
	opts := &slog.HandlerOptions{Level: level}
	if a.LogFormat == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}
