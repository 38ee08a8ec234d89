package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/url"
	"strconv"
	"time"

	"github.com/lvsd/lvsd/agent/planner"

	"github.com/lvsd/lvsd/agent/api"
	"github.com/lvsd/lvsd/agent/views"
)

func init() {
	commands["backend"] = command{
		usage: "drain|undrain|clear SERVICE BACKEND, weight SERVICE BACKEND N, list: change one backend of the running director (kept across restarts)",
		run:   backend,
	}
	flagSetup["backend"] = func(fs *flag.FlagSet) {
		fs.Bool("json", false, "print the agent's answer as JSON, for scripts")
		fs.String("socket", "", "the agent's local API socket (default: api.socket of the agent file)")
	}
}

const backendUsage = `usage: lvsd backend drain SERVICE BACKEND     no new connections (weight 0); established ones go on
       lvsd backend undrain SERVICE BACKEND   new connections again
       lvsd backend weight SERVICE BACKEND N  replace the file's weight (0-65535)
       lvsd backend clear SERVICE BACKEND     drop every override: the file decides again
       lvsd backend list                      the overrides in force
BACKEND is the address, or address:port, as in the service file.`

// backend changes one backend of the running director, or lists the
// overrides, over the local API.
func backend(ctx context.Context, e *env) error {
	args, err := interspersed(e.flags, e.args)
	if err != nil {
		return usageError{err}
	}
	if len(args) == 0 {
		return usagef("%s", backendUsage)
	}
	action, args := args[0], args[1:]
	want := map[string]int{"list": 0, planner.ActionDrain: 2, planner.ActionUndrain: 2, planner.ActionClear: 2, planner.ActionWeight: 3}
	n, ok := want[action]
	if !ok || len(args) != n {
		return usagef("%s", backendUsage)
	}
	asJSON := e.flags.Lookup("json").Value.String() == "true"
	if action == "list" {
		socket, err := readSocket(e, "backend list")
		if err != nil {
			return err
		}
		var raw json.RawMessage
		if err := api.NewClient(socket).Do(ctx, "GET", views.RouteBackends, &raw); err != nil {
			return err
		}
		return printOr(e.stdout, raw, asJSON, func(w io.Writer, list views.BackendList) error {
			return writeBackends(w, list.Backends, time.Now())
		})
	}
	q := url.Values{"service": {args[0]}, "backend": {args[1]}}
	if action == planner.ActionWeight {
		if _, err := strconv.Atoi(args[2]); err != nil {
			return usagef("weight %q is not a whole number (0-65535)", args[2])
		}
		q.Set("weight", args[2])
	}
	socket, err := apiSocket(e, "backend "+action)
	if err != nil {
		return err
	}
	var raw json.RawMessage
	if err := api.NewClient(socket).Do(ctx, "POST", views.RouteBackend+action+"?"+q.Encode(), &raw); err != nil {
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

// interspersed parses flags wherever they stand among the arguments
// (`lvsd backend drain web 10.0.0.11 --json`) and returns the others.
func interspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var out []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		args = fs.Args()
		if len(args) == 0 {
			return out, nil
		}
		out, args = append(out, args[0]), args[1:]
	}
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
