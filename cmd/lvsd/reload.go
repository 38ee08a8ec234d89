package main

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/lvsd/lvsd/agent/api"
	"github.com/lvsd/lvsd/agent/config"
)

func init() {
	subcommands = append(subcommands, func() *cobra.Command {
		return &cobra.Command{Use: "reload", Short: "make the running agent read its configuration again and apply it; " +
			"exits 1 when the configuration is rejected or a change fails (systemctl reload runs it)",
			Args: argCount(0, 0), ValidArgsFunction: cobra.NoFileCompletions, RunE: action(reload)}
	})
}

// reload asks the running agent to reload and waits until it has applied
// the result, so `systemctl reload` fails when the reload does.
func reload(ctx context.Context, e *env) error {
	a, err := config.LoadAgent(e.config)
	if err != nil {
		// The agent would reject it too: say so without asking it.
		return fmt.Errorf("configuration rejected, the running agent keeps the last good one: %w", err)
	}
	c := api.NewClient(a.APISocket)
	c.Timeout = 2 * api.LongestWait // a reload of every file at 10,000 services takes a while
	var res api.ReloadResult
	if err := c.Do(ctx, "POST", api.RouteReload, &res); err != nil {
		return err
	}
	if res.Error != "" {
		return errors.New(res.Error)
	}
	fmt.Fprintf(e.stdout, "reloaded: %d services changed, %d kernel changes\n", res.Changed, res.Changes)
	if len(res.Restart) > 0 {
		fmt.Fprintf(e.stdout, "these changed keys take effect after a restart (systemctl restart lvsd): %s\n", strings.Join(res.Restart, ", "))
	}
	return nil
}
