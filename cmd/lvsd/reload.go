package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/lvsd/lvsd/agent/api"
	"github.com/lvsd/lvsd/agent/config"
)

func init() {
	subcommands = append(subcommands, func() *cobra.Command {
		return &cobra.Command{Use: "reload", Short: "make the running agent read its configuration again and apply it; " +
			"exits 1 when the configuration is rejected or a change fails, 0 when a changed service is held for the " +
			"other directors (systemctl reload runs it)",
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
	writeReloadResult(e.stdout, res, time.Now())
	return nil
}

// writeReloadResult prints what an accepted reload did. A change held for
// the other directors is accepted too (it goes in force by itself), so it
// exits 0, but the answer must not read as applied.
func writeReloadResult(w io.Writer, res api.ReloadResult, now time.Time) {
	// Scripts read this line: its wording stays.
	fmt.Fprintf(w, "reloaded: %d services changed, %d kernel changes\n", res.Changed, res.Changes)
	if len(res.Restart) > 0 {
		fmt.Fprintf(w, "these changed keys take effect after a restart (systemctl restart lvsd): %s\n", strings.Join(res.Restart, ", "))
	}
	h := res.Held
	if h == nil {
		return
	}
	shown := h.Services[:min(len(h.Services), maxHeldShown)]
	names := strings.Join(shown, ", ")
	if more := len(h.Services) - len(shown); more > 0 {
		names += fmt.Sprintf(" and %d more", more)
	}
	fmt.Fprintf(w, "HELD until every live director has loaded the change (cluster.coordinated_changes), not in force yet: %s\n", names)
	waitingFor := "the other live directors (not compared yet)"
	if len(h.WaitingFor) > 0 {
		waitingFor = strings.Join(h.WaitingFor, ", ")
	}
	fmt.Fprintf(w, "  waiting for: %s\n", waitingFor)
	if len(h.NotWaitedFor) > 0 {
		fmt.Fprintf(w, "  not waited for (no comparable digest, an earlier release): %s\n", strings.Join(h.NotWaitedFor, ", "))
	}
	fmt.Fprintf(w, "  in force at the latest at %s (in %s), even if some director still lags; lvsd status shows the wait\n",
		h.Until.Format(time.DateTime), max(h.Until.Sub(now), 0).Round(time.Second))
}
