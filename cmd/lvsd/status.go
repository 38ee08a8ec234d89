package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/lvsd/lvsd/agent"
	"github.com/lvsd/lvsd/agent/api"
	"github.com/lvsd/lvsd/agent/config"
	"github.com/lvsd/lvsd/agent/realserver"
)

func init() {
	commands["status"] = command{usage: "show the running agent's services and backends, as the kernel has them now (--json)",
		run: status}
	flagSetup["status"] = func(fs *flag.FlagSet) {
		fs.Bool("json", false, "print the agent's status as JSON, for scripts")
		fs.String("socket", "", "the agent's local API socket (default: api.socket of the agent file)")
		fs.String("service", "", "only these services (comma-separated names)")
	}
}

// apiSocket is the running agent's socket: --socket, else api.socket of the
// agent file.
func apiSocket(e *env, command string) (string, error) {
	if socket := e.flags.Lookup("socket").Value.String(); socket != "" {
		return socket, nil
	}
	a, err := config.LoadAgent(e.config)
	if err != nil {
		return "", fmt.Errorf("%w\n(lvsd %s reads the socket path from the agent file; --socket PATH skips it)", err, command)
	}
	return a.APISocket, nil
}

// status asks the running agent (either role) over its local socket. The
// agent file only names the socket, so --socket works without one.
func status(ctx context.Context, e *env) error {
	asJSON := e.flags.Lookup("json").Value.String() == "true"
	socket, err := apiSocket(e, "status")
	if err != nil {
		return err
	}
	route := agent.RouteStatus
	if names := e.flags.Lookup("service").Value.String(); names != "" {
		q := url.Values{}
		for _, n := range strings.Split(names, ",") {
			q.Add("service", strings.TrimSpace(n))
		}
		route += "?" + q.Encode()
	}
	var raw json.RawMessage
	if err := api.NewClient(socket).Do(ctx, "GET", route, &raw); err != nil {
		return err
	}
	if asJSON {
		_, err := fmt.Fprintf(e.stdout, "%s\n", raw)
		return err
	}
	// Both roles serve GET /v1/status; only a director's has services.
	var shape struct {
		Services *json.RawMessage `json:"services"`
	}
	if err := json.Unmarshal(raw, &shape); err != nil {
		return fmt.Errorf("agent status: %w", err)
	}
	if shape.Services == nil {
		var st realserver.Status
		if err := json.Unmarshal(raw, &st); err != nil {
			return fmt.Errorf("agent status: %w", err)
		}
		return writeRealServerStatus(e.stdout, st, time.Now())
	}
	var st agent.Status
	if err := json.Unmarshal(raw, &st); err != nil {
		return fmt.Errorf("agent status: %w", err)
	}
	return writeDirectorStatus(e.stdout, st, time.Now())
}

// writeDirectorStatus prints a director's status as a table in the manner of
// `ipvsadm -Ln`: a line per IPVS service, then its real servers, with the
// configured next to the kernel's (effective) weight, connections and
// drain progress.
func writeDirectorStatus(w io.Writer, st agent.Status, now time.Time) error {
	fmt.Fprintf(w, "director %s, config %s\n", st.Node, st.Config)
	pass := "ok"
	if st.LastError != "" {
		pass = "FAILED: " + st.LastError
	}
	fmt.Fprintf(w, "last reconcile %s (%s ago, took %s): %s\n", st.LastReconcile.Format(time.DateTime),
		ago(now, st.LastReconcile), st.LastDuration, pass)
	if st.ConfigError != "" {
		fmt.Fprintf(w, "configuration REJECTED, the one loaded %s (%s ago) runs: %s\n",
			st.ConfigLoadedAt.Format(time.DateTime), ago(now, st.ConfigLoadedAt), st.ConfigError)
	}
	if !st.KernelAsOf.IsZero() && now.Sub(st.KernelAsOf) > time.Second {
		fmt.Fprintf(w, "kernel numbers as of that pass (over %d IPVS services: --service NAME reads them now)\n", agent.FreshLimit)
	}
	fmt.Fprintln(w)
	if st.Cluster != nil {
		if err := writeClusterStatus(w, st.Cluster); err != nil {
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
	if len(st.Services) == 0 {
		fmt.Fprintln(w, "no services configured")
		return nil
	}
	rows := [][]string{{"SERVICE", "PROT LOCAL/REMOTE ADDRESS:PORT", "SCHED/FORWARD", "WEIGHT", "CONFIGURED", "ACTIVE",
		"INACTIVE", "STATE"}}
	for _, s := range st.Services {
		active, inactive := 0, 0
		for _, d := range s.Destinations {
			active, inactive = active+d.ActiveConns, inactive+d.InactiveConns
		}
		sched := s.Scheduler
		if s.Flags != "" {
			sched += " (" + s.Flags + ")"
		}
		rows = append(rows, []string{s.Name, serviceAddress(s.Key), sched, "", "", strconv.Itoa(active),
			strconv.Itoa(inactive), serviceState(s)})
		for _, d := range s.Destinations {
			rows = append(rows, []string{"", "  -> " + d.Address, forwardName(d.Forwarding), weight(d.Weight),
				weight(d.ConfiguredWeight), strconv.Itoa(d.ActiveConns), strconv.Itoa(d.InactiveConns),
				destinationState(d)})
		}
	}
	if err := writeTable(w, "", rows); err != nil {
		return err
	}
	return writeRules(w, st.Services)
}

// writeRules prints, once per service, the rule of seed 000's eligibility
// policy that chose its eligible backends: why a healthy backend may sit at
// weight 0.
func writeRules(w io.Writer, services []agent.ServiceStatus) error {
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

func serviceState(s agent.ServiceStatus) string {
	var parts []string
	if !s.InKernel {
		parts = append(parts, "NOT IN KERNEL")
	}
	if s.VIPHeld {
		parts = append(parts, "VIP held")
	} else {
		parts = append(parts, "VIP not held")
	}
	return strings.Join(parts, ", ")
}

// destinationState says what is special about a backend: health first,
// then why its kernel weight is not the configured one.
func destinationState(d agent.DestinationStatus) string {
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
	case d.Sorry && d.DrainingFor != "":
		parts = append(parts, "sorry server, draining for "+d.DrainingFor)
	case d.Sorry:
		parts = append(parts, "sorry server, draining")
	case d.Weight < 0:
		parts = append(parts, "NOT IN KERNEL")
	case d.ConfiguredWeight < 0 && d.DrainingFor != "":
		parts = append(parts, "removed, draining for "+d.DrainingFor)
	case d.ConfiguredWeight < 0:
		parts = append(parts, "removed, draining")
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
