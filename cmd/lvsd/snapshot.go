package main

import (
	"context"
	"net/netip"

	"github.com/spf13/cobra"

	"github.com/lvsd/lvsd/agent"
)

func init() {
	subcommands = append(subcommands, func() *cobra.Command {
		return &cobra.Command{Use: "snapshot", Short: "print what plan reads from this host as JSON, for plan --from (needs root)",
			Long: "Print everything lvsd plan reads from this host as one JSON document (schema 1): the IPVS services " +
				"and destinations, the sync daemons, the IPVS timeouts, the sysctls lvsd may set, the digest of lvsd's " +
				"nftables tables, the addresses of the interfaces lvsd uses, the state directory's records and, in a " +
				"cluster, the VIPs the running agent holds.\n\n" +
				"lvsd plan --from FILE then plans against it anywhere, without root or IPVS.",
			Example: "  lvsd snapshot > lb1.json",
			Args:    argCount(0, 0), ValidArgsFunction: cobra.NoFileCompletions, RunE: action(snapshot)}
	})
}

func snapshot(ctx context.Context, e *env) error {
	cfg, k, err := onHost(ctx, e)
	if err != nil {
		return err
	}
	var held []netip.Addr
	if cfg.Agent.Cluster != nil {
		held = agentHeldVIPs(ctx, cfg)
	}
	snap, err := agent.TakeSnapshot(ctx, e.config, cfg, k, held, version)
	if err != nil {
		return err
	}
	return writeJSON(e.stdout, snap, nil)
}
