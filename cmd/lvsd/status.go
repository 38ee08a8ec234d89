package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/lvsd/lvsd/agent/api"
	"github.com/lvsd/lvsd/agent/config"
	"github.com/lvsd/lvsd/agent/realserver"
	"github.com/lvsd/lvsd/agent/views"
)

func init() {
	subcommands = append(subcommands, func() *cobra.Command {
		c := &cobra.Command{Use: "status", Short: "show the running agent's services and backends, as the kernel has them now " +
			"(a summary above " + strconv.Itoa(views.SummaryAbove) + " IPVS services; --all, --service, --stats, --rate, --connections, --json)",
			Args: argCount(0, 0), ValidArgsFunction: cobra.NoFileCompletions, RunE: action(status)}
		fs := c.Flags()
		fs.Bool("json", false, "print the agent's status as JSON, for scripts (every selected service unless --summary or --problems)")
		socketFlag(fs)
		fs.String("service", "", "only these services: comma-separated names or globs (web-*)")
		_ = c.RegisterFlagCompletionFunc("service", completeServiceFlag)
		fs.Bool("all", false, "every selected service with its backends, however many")
		fs.Bool("summary", false, "the totals and the worst services only, however few")
		fs.Bool("problems", false, "the totals and every service with a problem")
		fs.Bool("stats", false, "the kernel's counters per service and backend instead of weights and state "+
			"(connections, packets and bytes in and out, as ipvsadm -Ln --stats)")
		fs.Bool("connections", false, "the kernel's IPVS connection entries (as ipvsadm -Lnc), of --service only if given, "+
			"at most --limit of them")
		fs.Int("limit", views.DefaultConnectionLimit, "with --connections: list at most this many entries")
		_ = c.RegisterFlagCompletionFunc("limit", cobra.NoFileCompletions)
		fs.Bool("rate", false, "the kernel's rate estimates per service and backend instead of weights and state "+
			"(connections, packets and bytes per second, as ipvsadm -Ln --rate)")
		return c
	})
}

// statusView is the view the flags ask for: --all, --summary, --problems
// (at most one), else full for --json and auto for the table.
func statusView(e *env, asJSON bool) (views.View, error) {
	var asked []string
	view := views.ViewAuto
	if asJSON {
		view = views.ViewFull
	}
	for flagName, v := range map[string]views.View{"all": views.ViewFull, "summary": views.ViewSummary, "problems": views.ViewProblems} {
		if e.on(flagName) {
			asked, view = append(asked, "--"+flagName), v
		}
	}
	if len(asked) > 1 {
		slices.Sort(asked)
		return "", usagef("lvsd status: %s: choose one", strings.Join(asked, " and "))
	}
	return view, nil
}

// statusTable is what the table's columns show: --stats or --rate (not
// both), else weights and state.
func statusTable(e *env) (statusColumns, error) {
	stats, rate := e.on("stats"), e.on("rate")
	switch {
	case stats && rate:
		return 0, usagef("lvsd status: --rate and --stats: choose one")
	case stats:
		return columnsStats, nil
	case rate:
		return columnsRate, nil
	}
	return columnsState, nil
}

// apiSocket is the running agent's socket: --socket, else api.socket of the
// agent file.
func apiSocket(e *env, command string) (string, error) {
	socket, _, err := sockets(e, command)
	return socket, err
}

// readSocket is the socket of a command that only reads: apiSocket, or the
// read-only socket of the agent file (api.read_only_socket) when this user
// may not open the control socket.
func readSocket(e *env, command string) (string, error) {
	socket, readOnly, err := sockets(e, command)
	if err != nil || readOnly == "" {
		return socket, err
	}
	c, err := net.DialTimeout("unix", socket, time.Second)
	if err == nil {
		c.Close()
		return socket, nil
	}
	if errors.Is(err, os.ErrPermission) {
		return readOnly, nil
	}
	return socket, nil // let the request say what is wrong
}

// sockets are the control socket (--socket, else api.socket of the agent
// file) and the read-only one ("" with --socket or none configured).
func sockets(e *env, command string) (control, readOnly string, err error) {
	if socket := e.value("socket"); socket != "" {
		return socket, "", nil
	}
	a, err := config.LoadAgent(e.config)
	if err != nil {
		return "", "", fmt.Errorf("%w\n(lvsd %s reads the socket path from the agent file; --socket PATH skips it)", err, command)
	}
	if strings.HasPrefix(command, "backend") && a.Role != config.RoleDirector {
		return "", "", fmt.Errorf("lvsd %s changes a director's backends; this host's role is %s (lvsd drain takes a real server out)",
			command, a.Role)
	}
	if a.ReadOnlyAPI != nil {
		readOnly = a.ReadOnlyAPI.Socket
	}
	return a.APISocket, readOnly, nil
}

// status asks the running agent (either role) over its local socket. The
// agent file only names the socket, so --socket works without one.
func status(ctx context.Context, e *env) error {
	asJSON := e.on("json")
	if e.on("connections") {
		return statusConnections(ctx, e, asJSON)
	}
	view, err := statusView(e, asJSON)
	if err != nil {
		return err
	}
	cols, err := statusTable(e)
	if err != nil {
		return err
	}
	socket, err := readSocket(e, "status")
	if err != nil {
		return err
	}
	q := url.Values{"view": {string(view)}}
	for _, n := range serviceFlag(e) {
		q.Add("service", n)
	}
	c := api.NewClient(socket)
	// The full status of 10,000 services is 28 MB, seconds to build on a
	// slow machine.
	c.MaxAnswer, c.Timeout = 1<<30, api.LongestWait
	raw, err := c.Fetch(ctx, "GET", views.RouteStatus+"?"+q.Encode())
	if err != nil {
		return err
	}
	out := bufio.NewWriterSize(e.stdout, 64<<10) // a line per write would be a syscall per line
	if err := printStatus(out, raw, asJSON, cols, time.Now()); err != nil {
		return err
	}
	return out.Flush()
}

// printStatus prints the agent's answer: as indented JSON, or as the
// director's (with cols) or real server's table.
func printStatus(w io.Writer, raw []byte, asJSON bool, cols statusColumns, now time.Time) error {
	if asJSON {
		return printIndented(w, raw)
	}
	// Both roles serve GET /v1/status; only a director's says its role.
	var st views.Status
	if err := json.Unmarshal(raw, &st); err != nil {
		return fmt.Errorf("agent status: %w", err)
	}
	if st.Role != string(config.RoleDirector) {
		var rs realserver.Status
		if err := json.Unmarshal(raw, &rs); err != nil {
			return fmt.Errorf("agent status: %w", err)
		}
		return writeRealServerStatus(w, rs, now)
	}
	return writeDirectorStatus(w, st, cols, now)
}

// printIndented prints the agent's compact JSON indented.
func printIndented(w io.Writer, raw []byte) error {
	var b bytes.Buffer
	if err := json.Indent(&b, bytes.TrimSpace(raw), "", "  "); err != nil {
		return fmt.Errorf("agent answer: %w", err)
	}
	b.WriteByte('\n')
	_, err := b.WriteTo(w)
	return err
}

// writeDirectorStatus prints a director's status as a table in the manner of
// `ipvsadm -Ln`: a line per IPVS service, then its real servers, with the
// configured next to the kernel's (effective) weight, connections and
// drain progress; or with cols, their counters or rates.
func writeDirectorStatus(w io.Writer, st views.Status, cols statusColumns, now time.Time) error {
	fmt.Fprintf(w, "director %s, config %s\n", st.Node, st.Config)
	pass := "ok"
	if st.LastError != "" {
		pass = "FAILED: " + st.LastError
	}
	fmt.Fprintf(w, "last reconcile %s (%s ago, took %s): %s\n", st.LastReconcile.Format(time.DateTime),
		ago(now, st.LastReconcile), seconds(st.LastDuration), pass)
	if st.ConfigError != "" {
		fmt.Fprintf(w, "configuration REJECTED, the one loaded %s (%s ago) runs: %s\n",
			st.ConfigLoadedAt.Format(time.DateTime), ago(now, st.ConfigLoadedAt), st.ConfigError)
	}
	writeHeldChange(w, st.HeldChange, now)
	if st.Grounded != "" {
		fmt.Fprintf(w, "serving NO VIP: %s (the VIPs return when it clears)\n", st.Grounded)
	}
	if st.InterfacesDown != "" {
		fmt.Fprintf(w, "interface %s down: not serving its VIPs (they return when it is up)\n", st.InterfacesDown)
	}
	if !st.KernelAsOf.IsZero() && now.Sub(st.KernelAsOf) > time.Second {
		fmt.Fprintf(w, "kernel numbers as of that pass (over %d IPVS services: --service NAME reads them now)\n", views.FreshLimit)
	}
	fmt.Fprintln(w)
	if st.Cluster != nil {
		if err := writeClusterStatus(w, st.Cluster); err != nil {
			return err
		}
	}
	if len(st.VRRP) > 0 {
		if err := writeVRRPStatus(w, st.VRRP); err != nil {
			return err
		}
	}
	if st.ConfigSync != nil {
		if err := writeConfigSyncStatus(w, st.ConfigSync); err != nil {
			return err
		}
	}
	if st.ConnSync != nil {
		if err := writeConnSyncStatus(w, st.ConnSync); err != nil {
			return err
		}
	}
	if st.BGP != nil {
		if err := writeBGPStatus(w, st.BGP, st.Drained, st.DrainedAt); err != nil {
			return err
		}
	}
	if st.TOA != nil {
		writeTOAStatus(w, st.TOA)
	}
	summary := st.View == views.ViewSummary || st.View == views.ViewProblems
	if summary {
		writeStatusTotals(w, st.Totals)
		fmt.Fprintf(w, "\n%s\n", problemHeading(st))
	}
	if len(st.Services) == 0 && !summary {
		fmt.Fprintln(w, "no services configured")
		return nil
	}
	if len(st.Services) > 0 && cols != columnsState {
		if err := writeCounterTable(w, st.Services, cols); err != nil {
			return err
		}
	} else if len(st.Services) > 0 {
		if err := writeServiceTable(w, st.Services, summary, now); err != nil {
			return err
		}
		if err := writeRules(w, st.Services); err != nil {
			return err
		}
	}
	if summary {
		return writeSummaryHint(w, st)
	}
	return nil
}

// writeServiceTable prints services as `ipvsadm -Ln` does, a row per
// service and one per destination; withProblem adds each service's problem
// to its state.
func writeServiceTable(w io.Writer, services []views.ServiceStatus, withProblem bool, now time.Time) error {
	rows := make([][]string, 0, 1+len(services)*11)
	rows = append(rows, []string{"SERVICE", "PROT LOCAL/REMOTE ADDRESS:PORT", "SCHED/FORWARD", "WEIGHT", "CONFIGURED", "ACTIVE",
		"INACTIVE", "STATE"})
	for _, s := range services {
		active, inactive := 0, 0
		for _, d := range s.Destinations {
			active, inactive = active+d.ActiveConns, inactive+d.InactiveConns
		}
		sched := s.Scheduler
		if s.Flags != "" {
			sched += " (" + s.Flags + ")"
		}
		state := serviceState(s)
		if withProblem && s.Problem != "" && s.InKernel { // else the state says NOT IN KERNEL already
			state = strings.ToUpper(s.Problem) + ", " + state
		}
		rows = append(rows, []string{s.Name, serviceAddress(s.Key), sched, "", "", strconv.Itoa(active),
			strconv.Itoa(inactive), state})
		for _, d := range s.Destinations {
			rows = append(rows, []string{"", "  -> " + d.Address, forwardName(d.Forwarding), weight(d.Weight),
				weight(d.ConfiguredWeight), strconv.Itoa(d.ActiveConns), strconv.Itoa(d.InactiveConns),
				destinationState(d, now)})
		}
	}
	return writeTable(w, "", rows)
}

// writeRules prints, once per service, the rule of seed 000's eligibility
// policy that chose its eligible backends: why a healthy backend may sit at
// weight 0.
func writeRules(w io.Writer, services []views.ServiceStatus) error {
	seen := map[string]bool{}
	var lines []string
	for _, s := range services {
		if s.Rule != "" && !seen[s.Name] {
			seen[s.Name] = true
			lines = append(lines, fmt.Sprintf("  %s: %s\n", s.Name, s.Rule))
		}
	}
	if len(lines) == 0 {
		return nil
	}
	_, err := fmt.Fprintf(w, "\neligible backends by:\n%s", strings.Join(lines, ""))
	return err
}

// serviceAddress turns a key ("tcp:10.0.0.50:80", "fwmark:7/ipv4") into
// ipvsadm's column ("TCP  10.0.0.50:80", "FWM  7 (ipv4)").
func serviceAddress(key string) string {
	proto, rest, _ := strings.Cut(key, ":")
	if proto == "fwmark" {
		mark, fam, _ := strings.Cut(rest, "/")
		return "FWM  " + mark + " (" + fam + ")"
	}
	return strings.ToUpper(proto) + "  " + rest
}

func serviceState(s views.ServiceStatus) string {
	var parts []string
	if !s.InKernel {
		parts = append(parts, "NOT IN KERNEL")
	}
	held := "VIP held"
	if !s.VIPHeld {
		held = "VIP not held"
	}
	if s.Interface != "" {
		held += " on " + s.Interface
	}
	parts = append(parts, held)
	return strings.Join(parts, ", ")
}

// destinationState says what is special about a backend: health first,
// then why its kernel weight is not the configured one.
func destinationState(d views.DestinationStatus, now time.Time) string {
	var parts []string
	switch d.Health {
	case "unhealthy":
		parts = append(parts, "UNHEALTHY")
		if d.HealthError != "" {
			parts[0] += " (" + d.HealthError + ")"
		}
	case "pending":
		parts = append(parts, "health pending")
	}
	switch {
	case d.Sorry && d.ConfiguredWeight >= 0:
		parts = append(parts, "sorry server: no backend eligible")
	case d.Sorry && d.DrainingFor > 0:
		parts = append(parts, "sorry server, draining for "+seconds(d.DrainingFor))
	case d.Sorry:
		parts = append(parts, "sorry server, draining")
	case d.Weight < 0:
		parts = append(parts, "NOT IN KERNEL")
	case d.ConfiguredWeight < 0 && d.DrainingFor > 0:
		parts = append(parts, "removed, draining for "+seconds(d.DrainingFor))
	case d.ConfiguredWeight < 0:
		parts = append(parts, "removed, draining")
	case d.Override != nil:
		parts = append(parts, overrideWords(*d.Override, now)+" (lvsd backend)")
	case d.Weight == 0 && d.ConfiguredWeight > 0 && d.Health != "unhealthy":
		parts = append(parts, "not eligible (failover policy)")
	case d.Weight != d.ConfiguredWeight && d.Weight > 0:
		parts = append(parts, "weight from health check")
	}
	return strings.Join(parts, ", ")
}

// forwardName is ipvsadm's word for a forwarding method.
func forwardName(f string) string {
	switch f {
	case "route":
		return "Route"
	case "masq":
		return "Masq"
	}
	if rest, ok := strings.CutPrefix(f, "tunnel"); ok { // "tunnel/gue:6080": the encapsulation follows
		return "Tunnel" + rest
	}
	return f
}

// weight shows -1 (absent) as "-".
func weight(w int) string {
	if w < 0 {
		return "-"
	}
	return strconv.Itoa(w)
}

// seconds shows a JSON duration the way Go prints one: "7s", "3.2ms".
func seconds(s float64) string {
	return time.Duration(s * float64(time.Second)).Round(time.Microsecond).String()
}

// ago is an age in whole seconds: "4s", "3m12s".
func ago(now, t time.Time) string {
	if t.IsZero() {
		return "never"
	}
	return max(now.Sub(t), 0).Truncate(time.Second).String()
}

// writeRealServerStatus prints a real server's status: what its weight
// endpoint announces, its VIPs on lo (and what their tunnels lack) and its
// local checks.
func writeRealServerStatus(w io.Writer, st realserver.Status, now time.Time) error {
	fmt.Fprintf(w, "realserver %s\n", st.Node)
	switch {
	case st.Drained:
		fmt.Fprintf(w, "drained since %s (%s ago): the weight endpoint announces 0 (configured %d)\n",
			st.DrainedAt.Format(time.DateTime), ago(now, st.DrainedAt), st.ConfiguredWeight)
	default:
		fmt.Fprintf(w, "in service: the weight endpoint announces %d\n", st.Weight)
	}
	if st.HealthListen != "" {
		fmt.Fprintf(w, "weight endpoint: http://%s%s\n", st.HealthListen, st.HealthPath)
	} else {
		fmt.Fprintln(w, "weight endpoint: off")
	}
	missing := map[netip.Addr]bool{}
	for _, v := range st.MissingVIPs {
		missing[v] = true
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	vips := func(head string, list []netip.Addr) {
		fmt.Fprintln(tw, head)
		for _, v := range list {
			on := "yes"
			if missing[v] {
				on = "MISSING"
			}
			fmt.Fprintf(tw, "%s\t%s\n", v, on)
		}
	}
	vips("\nVIP\tON LO", st.VIPs)
	if len(st.TunnelVIPs) > 0 {
		vips("\nTUNNEL VIP\tON LO", st.TunnelVIPs)
	}
	for _, d := range st.DownTunnels {
		fmt.Fprintf(tw, "tunnel decapsulation: %s\n", d)
	}
	if t := st.TOA; t != nil {
		fmt.Fprintf(tw, "\nclient address (toa): cgroup %s, backends %s, directors %s\n", t.Cgroup,
			strings.Join(t.Backends, " "), strings.Join(t.Directors, " "))
		if t.Error != "" {
			fmt.Fprintf(tw, "  NOT IN PLACE: %s\n", t.Error)
		}
		fmt.Fprintf(tw, "  %d connections with the client's address, %d from other sources, %d directors' SYNs without the option, "+
			"%d without a saved SYN\n", t.Stored, t.NotDirector, t.NoOption, t.NoSYN)
	}
	if len(st.Checks) > 0 {
		fmt.Fprintln(tw, "\nLOCAL CHECK\tRESULT")
		for _, c := range st.Checks {
			res := "ok"
			if !c.OK {
				res = "FAILED: " + c.Error
			}
			fmt.Fprintf(tw, "%s\t%s\n", c.Check, res)
		}
	}
	return tw.Flush()
}

// writeTable prints rows as aligned columns, each line starting with
// indent. tabwriter pads the last column too: a row ending in an empty cell
// would end in spaces, so lines are trimmed.
func writeTable(w io.Writer, indent string, rows [][]string) error {
	var b bytes.Buffer
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	for _, r := range rows {
		fmt.Fprintln(tw, indent+strings.Join(r, "\t"))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for line := range strings.Lines(b.String()) {
		if _, err := fmt.Fprintln(w, strings.TrimRight(line, " \n")); err != nil {
			return err
		}
	}
	return nil
}
