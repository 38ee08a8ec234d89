package main

import (
	"context"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/lvsd/lvsd/agent"
	"github.com/lvsd/lvsd/agent/api"
	"github.com/lvsd/lvsd/agent/planner"
	"github.com/lvsd/lvsd/agent/views"
)

// socketFlag is --socket of the commands that talk to the running agent.
func socketFlag(fs *pflag.FlagSet) {
	fs.String("socket", "", "the agent's local API socket (default: api.socket of the agent file)")
}

// The completions read the --config file (default /etc/lvsd/lvsd.yaml) as
// lvsd check does; a file that does not load completes nothing.

// completedConfig loads the configuration the command line names.
func completedConfig(c *cobra.Command) *agent.LoadedConfig {
	path, err := c.Flags().GetString("config")
	if err != nil {
		return nil
	}
	cfg, err := agent.LoadConfig(path)
	if err != nil {
		return nil
	}
	return cfg
}

// serviceNames are the configured services' names.
func serviceNames(cfg *agent.LoadedConfig) []string {
	if cfg == nil {
		return nil
	}
	names := make([]string, 0, len(cfg.Services))
	for _, s := range cfg.Services {
		names = append(names, s.Name)
	}
	return names
}

// completeServiceBackend completes SERVICE, then BACKEND: those of the
// service file, or for undrain and clear the overrides in force when the
// running agent answers within a second.
func completeServiceBackend(c *cobra.Command, args []string, _ string) ([]cobra.Completion, cobra.ShellCompDirective) {
	const noFiles = cobra.ShellCompDirectiveNoFileComp
	switch len(args) {
	case 0:
		return serviceNames(completedConfig(c)), noFiles
	case 1:
		if c.Name() == planner.ActionUndrain || c.Name() == planner.ActionClear {
			if overrides := overriddenBackends(c, args[0]); len(overrides) > 0 {
				return overrides, noFiles
			}
		}
		return configuredBackends(completedConfig(c), args[0]), noFiles
	}
	return nil, noFiles
}

// configuredBackends are the service's backends as BACKEND names them:
// the address, or address:port, as in the service file.
func configuredBackends(cfg *agent.LoadedConfig, service string) []string {
	if cfg == nil {
		return nil
	}
	var out []string
	for _, s := range cfg.Services {
		if s.Name != service {
			continue
		}
		for _, b := range s.Backends {
			out = append(out, strings.TrimPrefix(planner.HealthKey(service, b), service+"/"))
		}
	}
	return out
}

// overriddenBackends asks the running agent which backends of service
// have an override.
func overriddenBackends(c *cobra.Command, service string) []string {
	config, _ := c.Flags().GetString("config")
	socket, err := readSocket(&env{name: c.Name(), flags: c.Flags(), config: config}, "backend list")
	if err != nil {
		return nil
	}
	client := api.NewClient(socket)
	client.Timeout = time.Second
	ctx, cancel := context.WithTimeout(orBackground(c.Context()), time.Second)
	defer cancel()
	var list views.BackendList
	if err := client.Do(ctx, "GET", views.RouteBackends, &list); err != nil {
		return nil
	}
	var out []string
	for _, b := range list.Backends {
		if b.Service == service {
			out = append(out, b.Backend)
		}
	}
	return out
}

// orBackground is ctx, or Background when cobra ran without one.
func orBackground(ctx context.Context) context.Context {
	if ctx == nil {
		return context.Background()
	}
	return ctx
}

// completeVirtual completes explain's second argument: each configured
// service's VIP:PORT/PROTO (the first port of a range).
func completeVirtual(c *cobra.Command, args []string, _ string) ([]cobra.Completion, cobra.ShellCompDirective) {
	cfg := completedConfig(c)
	if len(args) != 1 || cfg == nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	var out []string
	for _, s := range cfg.Services {
		for _, p := range s.Ports {
			for _, proto := range protocols(s.Protocol) {
				out = append(out, netip.AddrPortFrom(s.VIP, p.From).String()+"/"+proto+"\t"+s.Name)
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out), cobra.ShellCompDirectiveNoFileComp
}

// protocols are the protocols explain takes for a service's protocol.
func protocols(p string) []string {
	if p == "any" {
		return []string{"tcp", "udp"}
	}
	return []string{p}
}

// completeServiceFlag completes status --service with the service names.
func completeServiceFlag(c *cobra.Command, _ []string, _ string) ([]cobra.Completion, cobra.ShellCompDirective) {
	return serviceNames(completedConfig(c)), cobra.ShellCompDirectiveNoFileComp
}
