package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/lvsd/lvsd/agent/api"
	"github.com/lvsd/lvsd/agent/planner"
	"github.com/lvsd/lvsd/agent/views"
)

func init() {
	subcommands = append(subcommands, newBackendCommand)
}

// newBackendCommand is lvsd backend and its actions, each a command of its
// own so that the shells complete them and their arguments.
func newBackendCommand() *cobra.Command {
	c := &cobra.Command{Use: "backend ACTION", Short: "change one backend of the running director (kept across restarts), or list the overrides",
		Long: backendUsage, Args: cobra.ArbitraryArgs, ValidArgsFunction: cobra.NoFileCompletions, RunE: parentOnly(backendUsage)}
	c.PersistentFlags().Bool("json", false, "print the agent's answer as JSON, for scripts")
	socketFlag(c.PersistentFlags())
	for _, a := range []struct{ use, short string }{
		{planner.ActionDrain + " SERVICE BACKEND", "no new connections (weight 0); established ones go on"},
		{planner.ActionUndrain + " SERVICE BACKEND", "new connections again"},
		{planner.ActionWeight + " SERVICE BACKEND N", "replace the file's weight (0-65535)"},
		{planner.ActionClear + " SERVICE BACKEND", "drop every override: the file decides again"},
	} {
		n := len(strings.Fields(a.use)) - 1
		c.AddCommand(&cobra.Command{Use: a.use, Short: a.short, Args: argCount(n, n),
			Long:              a.short + ".\nSERVICE is the service's name; BACKEND is the address, or address:port, as in the service file.",
			Example:           "  lvsd backend " + strings.NewReplacer("SERVICE BACKEND", "web 10.0.0.11", " N", " 40").Replace(a.use),
			ValidArgsFunction: completeServiceBackend, RunE: action(backend)})
	}
	c.AddCommand(&cobra.Command{Use: "list", Short: "the overrides in force", Args: argCount(0, 0),
		ValidArgsFunction: cobra.NoFileCompletions, RunE: action(backendList)})
	return c
}

const backendUsage = `usage: lvsd backend drain SERVICE BACKEND     no new connections (weight 0); established ones go on
       lvsd backend undrain SERVICE BACKEND   new connections again
       lvsd backend weight SERVICE BACKEND N  replace the file's weight (0-65535)
       lvsd backend clear SERVICE BACKEND     drop every override: the file decides again
       lvsd backend list                      the overrides in force
BACKEND is the address, or address:port, as in the service file.`

// backendList lists the running director's backend overrides.
func backendList(ctx context.Context, e *env) error {
	socket, err := readSocket(e, "backend list")
	if err != nil {
		return err
	}
	var raw json.RawMessage
	if err := api.NewClient(socket).Do(ctx, "GET", views.RouteBackends, &raw); err != nil {
		return err
	}
	return printOr(e.stdout, raw, e.on("json"), func(w io.Writer, list views.BackendList) error {
		return writeBackends(w, list.Backends, time.Now())
	})
}

// backend changes one backend of the running director over the local
// API; the command's name is the action.
func backend(ctx context.Context, e *env) error {
	verb, args := e.name, e.args
	asJSON := e.on("json")
	q := url.Values{"service": {args[0]}, "backend": {args[1]}}
	if verb == planner.ActionWeight {
		if _, err := strconv.Atoi(args[2]); err != nil {
			return usagef("weight %q is not a whole number (0-65535)", args[2])
		}
		q.Set("weight", args[2])
	}
	socket, err := apiSocket(e, "backend "+verb)
	if err != nil {
		return err
	}
	var raw json.RawMessage
	if err := api.NewClient(socket).Do(ctx, "POST", views.RouteBackend+verb+"?"+q.Encode(), &raw); err != nil {
		return err
	}
	var st views.BackendState
	if err := json.Unmarshal(raw, &st); err != nil {
		return fmt.Errorf("agent answer: %w", err)
	}
	if err := printOr(e.stdout, raw, asJSON, func(w io.Writer, st views.BackendState) error {
		return writeBackendState(w, st, time.Now())
	}); err != nil {
		return err
	}
	if st.PassError != "" {
		return fmt.Errorf("the override is recorded, but applying it failed (the agent retries): %s", st.PassError)
	}
	return nil
}

// printOr prints raw as it is with asJSON, else decoded and written by w.
func printOr[T any](out io.Writer, raw json.RawMessage, asJSON bool, write func(io.Writer, T) error) error {
	if asJSON {
		_, err := fmt.Fprintf(out, "%s\n", raw)
		return err
	}
	var v T
	if err := json.Unmarshal(raw, &v); err != nil {
		return fmt.Errorf("agent answer: %w", err)
	}
	return write(out, v)
}

// writeBackendState says what a change left: the override, the file's
// weight, and the backend's weight in each IPVS service now.
func writeBackendState(w io.Writer, st views.BackendState, now time.Time) error {
	fmt.Fprintf(w, "%s %s: %s\n", st.Service, st.Backend, overrideSummary(st, now))
	for _, k := range st.Kernel {
		fmt.Fprintf(w, "  %s -> %s  weight %s in the kernel\n", serviceAddress(k.IPVSService), k.Destination, weight(k.Weight))
	}
	return nil
}

// overrideSummary is a backend's override in words, with the file's
// weight.
func overrideSummary(st views.BackendState, now time.Time) string {
	s := "in service"
	if st.Drained {
		s = fmt.Sprintf("drained since %s (%s ago)", st.DrainedAt.Format(time.DateTime), ago(now, st.DrainedAt))
	}
	if st.Weight != nil {
		return s + fmt.Sprintf(", weight %d set %s ago (the file says %d)", *st.Weight, ago(now, st.WeightAt), st.ConfiguredWeight)
	}
	s += fmt.Sprintf(", the file's weight %d", st.ConfiguredWeight)
	if !st.Drained {
		s += " (no override left)"
	}
	return s
}

// writeBackends lists the overrides in force.
func writeBackends(w io.Writer, list []views.BackendState, now time.Time) error {
	if len(list) == 0 {
		_, err := fmt.Fprintln(w, "no backend overrides: every backend runs as its service file says")
		return err
	}
	rows := [][]string{{"SERVICE", "BACKEND", "OVERRIDE", "CONFIGURED", "KERNEL"}}
	for _, st := range list {
		kernel := ""
		for i, k := range st.Kernel {
			if i > 0 {
				kernel += " "
			}
			kernel += weight(k.Weight)
		}
		rows = append(rows, []string{st.Service, st.Backend, overrideWords(st.BackendOverride, now),
			weight(st.ConfiguredWeight), kernel})
	}
	return writeTable(w, "", rows)
}

// overrideWords is an override in a table cell or a status line.
func overrideWords(ov planner.BackendOverride, now time.Time) string {
	var s string
	if ov.Drained {
		s = "drained " + ago(now, ov.DrainedAt) + " ago"
	}
	if ov.Weight != nil {
		if s != "" {
			s += ", "
		}
		s += fmt.Sprintf("weight %d set %s ago", *ov.Weight, ago(now, ov.WeightAt))
	}
	return s
}
