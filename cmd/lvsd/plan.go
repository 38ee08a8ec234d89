package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"slices"

	"github.com/spf13/cobra"

	"github.com/lvsd/lvsd/agent"
	"github.com/lvsd/lvsd/agent/api"
	"github.com/lvsd/lvsd/agent/config"
	"github.com/lvsd/lvsd/agent/planner"
	"github.com/lvsd/lvsd/agent/views"
)

func init() {
	subcommands = append(subcommands, func() *cobra.Command {
		c := &cobra.Command{Use: "check", Short: "validate the configuration, touch nothing (exit 0 or 1)",
			Args: argCount(0, 0), ValidArgsFunction: cobra.NoFileCompletions, RunE: action(check)}
		c.Flags().Bool("json", false, "print the result as JSON, for scripts (schema 1: ok, errors with file and line, warnings)")
		return c
	}, func() *cobra.Command {
		c := &cobra.Command{Use: "plan", Short: "show what run would change on this host now, change nothing",
			Long: "Show what lvsd run would change on this host now, and change nothing.\n\n" +
				"With --detailed-exitcode the exit status says whether the host matches the configuration: " +
				"0 no changes, 2 changes pending, 1 an error.",
			Example: "  lvsd plan --detailed-exitcode\n  lvsd plan --config ./lvsd.yaml --from lb1.json   # from lvsd snapshot on the director",
			Args:    argCount(0, 0), ValidArgsFunction: cobra.NoFileCompletions, RunE: action(plan)}
		c.Flags().Bool("takeover", false, "plan as if this director held every VIP (what a takeover would do)")
		c.Flags().Bool("json", false, "print the changes as JSON, for scripts (schema 1)")
		c.Flags().Bool("detailed-exitcode", false, "exit 2 when there are changes to make, 0 when there are none (1 on an error)")
		c.Flags().String("from", "", "plan against the host as `FILE` (from lvsd snapshot) recorded it, not this host's kernel: needs neither root nor IPVS")
		return c
	})
}

// jsonSchema is the version of the JSON that check --json and plan --json
// print, as the local API's answers carry theirs.
const jsonSchema = 1

// checkResult is lvsd check --json.
type checkResult struct {
	Schema       int           `json:"schema"`
	Config       string        `json:"config"`
	OK           bool          `json:"ok"`
	Role         string        `json:"role,omitempty"`
	Services     int           `json:"services"`
	IPVSServices int           `json:"ipvs_services"`
	Errors       []checkError  `json:"errors"`
	Warnings     []checkNotice `json:"warnings"`
	// Notes say what an accepted configuration does that a reader may not
	// expect (what protocol any balances).
	Notes []checkNotice `json:"notes,omitempty"`
}

// checkError is one problem of a rejected configuration, placed where the
// file has it (line and column 0: the whole file, or no file).
type checkError struct {
	File    string `json:"file,omitempty"`
	Line    int    `json:"line,omitempty"`
	Column  int    `json:"column,omitempty"`
	Message string `json:"message"`
}

// checkNotice is a warning about a configuration that is accepted.
type checkNotice struct {
	Message string `json:"message"`
}

func check(_ context.Context, e *env) error {
	cfg, err := agent.LoadConfig(e.config)
	if e.on("json") {
		return writeJSON(e.stdout, checkReport(e.config, cfg, err), err)
	}
	if err != nil {
		return err
	}
	for _, w := range cfg.Agent.Warnings() {
		fmt.Fprintf(e.stderr, "%s: warning: %s\n", e.config, w)
	}
	fmt.Fprintf(e.stdout, "%s: ok (role %s, %d services, %d IPVS services)\n", e.config, cfg.Agent.Role,
		len(cfg.Services), len(cfg.Desired.Services))
	for _, w := range cfg.Agent.Cluster.Warnings() {
		fmt.Fprintf(e.stdout, "%s: warning: %s\n", e.config, w)
	}
	for _, n := range config.Notes(cfg.Services) {
		fmt.Fprintf(e.stdout, "note: %s\n", n)
	}
	return nil
}

// checkReport is what check found, for --json.
func checkReport(path string, cfg *agent.LoadedConfig, err error) checkResult {
	r := checkResult{Schema: jsonSchema, Config: path, OK: err == nil, Errors: []checkError{}, Warnings: []checkNotice{}}
	if err != nil {
		var list config.List
		if !errors.As(err, &list) {
			list = config.List{{Msg: err.Error()}}
		}
		for _, p := range list {
			r.Errors = append(r.Errors, checkError{File: p.File, Line: p.Line, Column: p.Col, Message: p.Msg})
		}
		return r
	}
	r.Role, r.Services, r.IPVSServices = string(cfg.Agent.Role), len(cfg.Services), len(cfg.Desired.Services)
	for _, w := range append(cfg.Agent.Warnings(), cfg.Agent.Cluster.Warnings()...) {
		r.Warnings = append(r.Warnings, checkNotice{Message: w})
	}
	for _, n := range config.Notes(cfg.Services) {
		r.Notes = append(r.Notes, checkNotice{Message: n})
	}
	return r
}

// writeJSON prints v indented and passes err on: a failed command still
// prints its JSON and exits 1.
func writeJSON(w io.Writer, v any, err error) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false) // "->" of a destination op as it is, not \u003e
	if jerr := enc.Encode(v); jerr != nil {
		return jerr
	}
	return err
}

// planResult is lvsd plan --json.
type planResult struct {
	Schema   int          `json:"schema"`
	Config   string       `json:"config"`
	Takeover bool         `json:"takeover"`
	Changes  []planChange `json:"changes"`
}

// planChange is one op of the plan, in the words lvsd plan prints.
type planChange struct {
	Op     string `json:"op"`
	Change string `json:"change"`
	Reason string `json:"reason,omitempty"`
	NAT    string `json:"nat,omitempty"` // replace-nat: the nftables ruleset it installs
}

// planKernel opens the host's kernel adapters for plan; tests put fakes in.
var planKernel = openKernel

// onHost loads the configuration as on this host and opens its kernel, as
// plan and snapshot read them.
func onHost(ctx context.Context, e *env) (*agent.LoadedConfig, agent.Kernel, error) {
	cfg, err := agent.LoadConfigOnHost(e.config, admitOnHost(ctx))
	if err != nil {
		return nil, agent.Kernel{}, err
	}
	k, err := planKernel()
	return cfg, k, err
}

func plan(ctx context.Context, e *env) error {
	if from := e.value("from"); from != "" {
		return planFrom(ctx, e, from)
	}
	cfg, k, err := onHost(ctx, e)
	if err != nil {
		return err
	}
	if cfg.Agent.Cluster == nil {
		k.Announcer = nil // a director alone never announces
	}
	takeover := e.on("takeover")
	held, err := heldVIPs(ctx, cfg, takeover)
	if err != nil {
		return err
	}
	ops, err := agent.PlanFor(ctx, cfg, k, held)
	if err != nil {
		return err
	}
	return finishPlan(e, takeover, ops)
}

// planFrom is plan against the host a snapshot recorded: the
// configuration loaded as that host did, the VIPs it held, its kernel and
// state directory; nothing of this host is read but the configuration.
func planFrom(ctx context.Context, e *env, file string) error {
	snap, err := agent.ReadSnapshot(file)
	if err != nil {
		return err
	}
	cfg, err := agent.LoadConfigOnHost(e.config, snap.Admit())
	if err != nil {
		return err
	}
	takeover := e.on("takeover")
	var held func(netip.Addr) bool // nil: all
	if cfg.Agent.Cluster != nil && !takeover {
		held = snap.Held()
	}
	ops, err := agent.PlanFromSnapshot(ctx, cfg, snap, held)
	if err != nil {
		return fmt.Errorf("planning from %s: %w", file, err)
	}
	return finishPlan(e, takeover, ops)
}

// finishPlan prints ops and says, with --detailed-exitcode, whether
// changes are pending.
func finishPlan(e *env, takeover bool, ops []planner.Op) error {
	if err := writePlan(e.stdout, e.config, takeover, ops, e.on("json")); err != nil {
		return err
	}
	if len(ops) > 0 && e.on("detailed-exitcode") {
		return errChangesPending
	}
	return nil
}

// writePlan prints the plan's ops as lines (a replace-nat with its ruleset)
// or as JSON.
func writePlan(w io.Writer, path string, takeover bool, ops []planner.Op, asJSON bool) error {
	if asJSON {
		r := planResult{Schema: jsonSchema, Config: path, Takeover: takeover, Changes: make([]planChange, 0, len(ops))}
		for _, op := range ops {
			c := planChange{Op: op.Kind.String(), Change: op.Describe(), Reason: op.Reason}
			if op.Kind == planner.ReplaceNAT {
				c.NAT = op.NAT.String()
			}
			r.Changes = append(r.Changes, c)
		}
		return writeJSON(w, r, nil)
	}
	if len(ops) == 0 {
		_, err := fmt.Fprintln(w, "no changes: the host matches the configuration")
		return err
	}
	for _, op := range ops {
		fmt.Fprintln(w, op)
		if op.Kind == planner.ReplaceNAT {
			fmt.Fprint(w, lines(op.NAT.String()))
		}
	}
	return nil
}

// heldVIPs says which VIPs `lvsd plan` plans for: all of them without a
// cluster or with --takeover; in a cluster those the running agent holds
// (none when it does not answer).
func heldVIPs(ctx context.Context, cfg *agent.LoadedConfig, takeover bool) (func(netip.Addr) bool, error) {
	if cfg.Agent.Cluster == nil || takeover {
		return nil, nil
	}
	held := agentHeldVIPs(ctx, cfg)
	return func(v netip.Addr) bool { return slices.Contains(held, v) }, nil
}

// agentHeldVIPs are the VIPs the running agent holds (none when it does not
// answer or is not in a cluster).
func agentHeldVIPs(ctx context.Context, cfg *agent.LoadedConfig) []netip.Addr {
	var st views.Status
	var held []netip.Addr
	// The summary: the cluster part is all this needs, not every service.
	route := views.RouteStatus + "?view=" + string(views.ViewSummary)
	if err := api.NewClient(cfg.Agent.APISocket).Do(ctx, "GET", route, &st); err == nil && st.Cluster != nil {
		for _, v := range st.Cluster.VIPs {
			if a, err := netip.ParseAddr(v.VIP); err == nil && v.Held {
				held = append(held, a)
			}
		}
	}
	return held
}
