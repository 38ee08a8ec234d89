package main

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/lvsd/lvsd/agent/api"
	"github.com/lvsd/lvsd/agent/config"
	"github.com/lvsd/lvsd/agent/director"
	"github.com/lvsd/lvsd/cluster"
	"github.com/spf13/cobra"
)

func init() {
	subcommands = append(subcommands, func() *cobra.Command {
		c := &cobra.Command{Use: "restart-hold", Short: "before a restart (systemctl restart lvsd): the other directors keep this one's VIPs where they are for --for (default " +
			cluster.DefaultRestartHold.String() + ", at most " + cluster.MaxRestartHold.String() + "; 0 ends a hold)",
			Args: argCount(0, 0), ValidArgsFunction: cobra.NoFileCompletions, RunE: action(restartHold)}
		c.Flags().Duration("for", cluster.DefaultRestartHold, "how long the other directors keep this one's VIPs where they are")
		return c
	})
}

func restartHold(ctx context.Context, e *env) error {
	a, err := config.LoadAgent(e.config)
	if err != nil {
		return err
	}
	if a.Role != config.RoleDirector || a.Cluster == nil {
		return errors.New("restart-hold is for a director in a cluster: " + e.config + " has none, and its VIPs stay over a restart anyway")
	}
	d, err := e.flags.GetDuration("for")
	if err != nil {
		return err
	}
	var st director.RestartHoldStatus
	if err := api.NewClient(a.APISocket).Do(ctx, "POST", director.RouteRestartHold+"?for="+url.QueryEscape(d.String()), &st); err != nil {
		return err
	}
	if st.HoldSeconds == 0 {
		fmt.Fprintf(e.stdout, "%s: restart hold ended: a stop hands the VIPs over again\n", st.Node)
		return nil
	}
	fmt.Fprintf(e.stdout, "%s: the other directors keep its VIPs (%s) where they are until %s: restart lvsd now\n",
		st.Node, strings.Join(st.VIPs, ", "), st.Until.Format(time.RFC3339))
	return nil
}
