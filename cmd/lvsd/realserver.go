package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/lvsd/lvsd/agent/api"
	"github.com/lvsd/lvsd/agent/config"
	"github.com/lvsd/lvsd/agent/realserver"
	"github.com/lvsd/lvsd/agent/sdnotify"
	"github.com/lvsd/lvsd/arp"
	"github.com/lvsd/lvsd/nat"
)

func init() {
	commands["drain"] = command{usage: "real server: announce weight 0 to the directors (kept across restarts)", run: drain}
	commands["undrain"] = command{usage: "real server: announce the configured weight again", run: undrain}
	commands["cleanup"] = command{usage: "real server: remove the VIPs, sysctls and tunnel setup lvsd added (stop the agent first)", run: cleanup}
}

// realServerHost is the real host: rtnetlink for lo and tunnel devices,
// /proc/sys for sysctls, generic netlink for GUE ports, nftables for the
// MSS clamp of tunnel VIPs.
func realServerHost() realserver.Host {
	return realserver.Host{Addrs: arp.Kernel{}, Sysctls: arp.ProcSys{}, Tunnels: arp.KernelTunnels{}, NAT: nat.NewKernel()}
}

// runRealServer is `lvsd run` for role realserver; reload carries SIGHUP.
func runRealServer(ctx context.Context, e *env, a *config.Agent, reload <-chan struct{}) error {
	log := newLogger(a, e.stderr).With("role", "realserver")
	apiL, err := api.Listen(a.APISocket)
	if err != nil {
		return fmt.Errorf("api socket: %w", err)
	}
	var healthL net.Listener
	if addr := a.RealServer.Health.Listen; addr != "" {
		if healthL, err = net.Listen("tcp", addr); err != nil {
			apiL.Close()
			return fmt.Errorf("realserver.health.listen: %w", err)
		}
	}
	ag := realserver.New(realserver.Options{ConfigPath: e.config, Config: a, Host: realServerHost(), Log: log})
	go sdnotify.Run(ctx, log, systemd{}, sdnotify.SocketLiveness(a.APISocket))
	return ag.Run(ctx, reload, apiL, healthL)
}

func drain(ctx context.Context, e *env) error   { return setDrain(ctx, e, true) }
func undrain(ctx context.Context, e *env) error { return setDrain(ctx, e, false) }

func setDrain(ctx context.Context, e *env, on bool) error {
	a, err := realServerConfig(e, "drain and undrain")
	if err != nil {
		return err
	}
	route := realserver.RouteUndrain
	if on {
		route = realserver.RouteDrain
	}
	var st realserver.Status
	if err := api.NewClient(a.APISocket).Do(ctx, "POST", route, &st); err != nil {
		return err
	}
	if st.Drained {
		fmt.Fprintf(e.stdout, "%s: drained: the weight endpoint announces 0 (configured weight %d), since %s\n",
			st.Node, st.ConfiguredWeight, st.DrainedAt.Format(time.RFC3339))
	} else {
		fmt.Fprintf(e.stdout, "%s: in service: the weight endpoint announces %d\n", st.Node, st.Weight)
	}
	return nil
}

func cleanup(ctx context.Context, e *env) error {
	a, err := realServerConfig(e, "cleanup")
	if err != nil {
		return err
	}
	// A running agent would put everything back at its next pass.
	if c, err := net.DialTimeout("unix", a.APISocket, time.Second); err == nil {
		c.Close()
		return fmt.Errorf("an lvsd agent is running (it answers on %s): stop it first", a.APISocket)
	}
	ops, err := realserver.Cleanup(ctx, realServerHost(), a.StateDir)
	for _, op := range ops {
		fmt.Fprintln(e.stdout, op)
	}
	if err == nil && len(ops) == 0 {
		fmt.Fprintln(e.stdout, "nothing to clean up: nothing lvsd added is left")
	}
	return err
}

// realServerConfig loads the agent file and checks it is a real server's.
func realServerConfig(e *env, what string) (*config.Agent, error) {
	a, err := config.LoadAgent(e.config)
	if err != nil {
		return nil, err
	}
	if a.Role != config.RoleRealServer {
		return nil, errors.New(what + " is for role realserver; " + e.config + " has role " + string(a.Role))
	}
	return a, nil
}
