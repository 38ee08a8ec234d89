package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/spf13/cobra"

	"github.com/lvsd/lvsd/agent"
	"github.com/lvsd/lvsd/agent/api"
	"github.com/lvsd/lvsd/agent/config"
	"github.com/lvsd/lvsd/agent/planner"
	"github.com/lvsd/lvsd/agent/realserver"
	"github.com/lvsd/lvsd/agent/views"
	"github.com/lvsd/lvsd/arp"
	"github.com/lvsd/lvsd/arp/sysctl"
	"github.com/lvsd/lvsd/nat"
	"github.com/lvsd/lvsd/nat/toa"
)

func init() {
	for _, c := range []struct {
		use, short string
		run        func(context.Context, *env) error
	}{
		{"drain", "take this host out of service, keeping its connections (kept across restarts)", drain},
		{"undrain", "put this host back in service", undrain},
		{"cleanup", "remove what lvsd added and leaves behind when stopped (stop the agent first): a real server's VIPs, sysctls, tunnel setup and TOA programs, a director's TOA program", cleanup},
	} {
		subcommands = append(subcommands, func() *cobra.Command {
			return &cobra.Command{Use: c.use, Short: c.short, Args: argCount(0, 0), ValidArgsFunction: cobra.NoFileCompletions,
				RunE: action(c.run)}
		})
	}
}

// realServerHost is the real host: rtnetlink for lo and tunnel devices,
// /proc/sys for sysctls, generic netlink for GUE ports, nftables for the
// MSS clamp of tunnel VIPs.
func realServerHost() realserver.Host {
	return realserver.Host{Addrs: arp.Kernel{}, Sysctls: sysctl.ProcSys{}, Tunnels: arp.KernelTunnels{}, NAT: nat.NewKernel(),
		TOA: toa.NewOnDemandRealServer(toa.Options{})}
}

func drain(ctx context.Context, e *env) error   { return setDrain(ctx, e, true) }
func undrain(ctx context.Context, e *env) error { return setDrain(ctx, e, false) }

func setDrain(ctx context.Context, e *env, on bool) error {
	a, err := config.LoadAgent(e.config)
	if err != nil {
		return err
	}
	if a.Role == config.RoleDirector {
		return setDirectorDrain(ctx, e, a, on)
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

// setDirectorDrain drains a director: with BGP its routes are withdrawn
// (or depreferred) while its established connections go on.
func setDirectorDrain(ctx context.Context, e *env, a *config.Agent, on bool) error {
	if a.BGP == nil {
		return errors.New("drain on a director withdraws its BGP routes: " + e.config + " has no bgp block (drain a real server on the real server)")
	}
	route := views.RouteUndrain
	if on {
		route = views.RouteDrain
	}
	var st agent.HolderState
	if err := api.NewClient(a.APISocket).Do(ctx, "POST", route, &st); err != nil {
		return err
	}
	if st.Drained {
		verb := "withdrawn"
		if a.BGP.Drain == "deprefer" {
			verb = "depreferred"
		}
		fmt.Fprintf(e.stdout, "%s: drained since %s: its routes are %s, its connections go on\n", a.Node,
			st.DrainedAt.Format(time.RFC3339), verb)
	} else {
		fmt.Fprintf(e.stdout, "%s: in service: its routes are announced\n", a.Node)
	}
	return nil
}

func cleanup(ctx context.Context, e *env) error {
	a, err := config.LoadAgent(e.config)
	if err != nil {
		return err
	}
	// A running agent would put everything back at its next pass.
	if c, err := net.DialTimeout("unix", a.APISocket, time.Second); err == nil {
		c.Close()
		return fmt.Errorf("an lvsd agent is running (it answers on %s): stop it first", a.APISocket)
	}
	var ops []planner.Op
	if a.Role == config.RoleDirector {
		ops, err = agent.CleanupTOA(ctx, agent.Kernel{TOA: toa.NewOnDemandDirector(toa.DirectorOptions{})})
	} else {
		ops, err = realserver.Cleanup(ctx, realServerHost(), a.StateDir)
	}
	for _, op := range ops {
		fmt.Fprintln(e.stdout, op.Describe())
	}
	switch {
	case err != nil:
	case len(ops) == 0 && a.Role == config.RoleDirector:
		fmt.Fprintln(e.stdout, "nothing to clean up: no TOA program is pinned (a director's IPVS services, nftables tables and addresses go with its services)")
	case len(ops) == 0:
		fmt.Fprintln(e.stdout, "nothing to clean up: nothing lvsd added is left")
	}
	return err
}
