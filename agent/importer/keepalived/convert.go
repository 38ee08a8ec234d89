package keepalived

import (
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/lvsd/lvsd/agent/importer"
)

// ConvertOptions says how to convert.
type ConvertOptions struct {
	// Scheduler "": keep each virtual server's scheduler; "mh": Maglev for
	// every service (lvsd's default, which a cluster of directors needs to
	// agree on a backend without connection sync).
	Scheduler string
	// KeyFile is the cluster key file the agent file names (default
	// /etc/lvsd/cluster.key).
	KeyFile string
	// Cluster "": the vrrp_instances become lvsd's own active-standby
	// cluster; ClusterVRRP: cluster.mode vrrp, to run beside keepalived
	// while a pair moves one director at a time.
	Cluster string
	// Node is the director's name when global_defs has no router_id
	// ("": leave node out, lvsd then uses the hostname).
	Node string
}

// keepalived's defaults, where they differ from lvsd's.
const (
	defaultScheduler   = "wlc"
	defaultDelayLoop   = 60 * time.Second
	defaultConnTimeout = 5 * time.Second
	defaultRetry       = 1
	defaultPersistence = 360 * time.Second
	maxGroupAddresses  = 4096 // a range in a virtual_server_group expands to at most this many VIPs
)

// converter holds one conversion's state.
type converter struct {
	opt      ConvertOptions
	res      *importer.Result
	seen     map[*Node]bool // nodes whose keyword the report covers
	groups   map[string]*Node
	scripts  map[string]*Node
	services []*service
	vips     map[netip.Addr]string // VIP -> the first service on it
	hooks    []hookNote            // notify programs, for the agent file's comments
	vrrp     vrrpMode              // ConvertOptions.Cluster vrrp
}

// Convert turns the statements of a keepalived.conf into lvsd's files
// and a report naming every keyword.
func Convert(nodes []*Node, opt ConvertOptions) *importer.Result {
	c := &converter{opt: opt, res: &importer.Result{}, seen: map[*Node]bool{}, groups: map[string]*Node{},
		scripts: map[string]*Node{}, vips: map[netip.Addr]string{}}
	if c.opt.KeyFile == "" {
		c.opt.KeyFile = "/etc/lvsd/cluster.key"
	}
	for _, n := range nodes {
		switch n.Keyword {
		case "virtual_server_group":
			if len(n.Args) == 1 {
				c.groups[n.Args[0]] = n
			}
		case "vrrp_script":
			if len(n.Args) == 1 {
				c.scripts[n.Args[0]] = n
			}
		}
	}
	for _, n := range nodes {
		if n.Keyword == "virtual_server" {
			c.virtualServer(n)
		}
	}
	c.agentFile(nodes)
	for _, n := range nodes {
		switch {
		case c.seen[n]:
		case n.Keyword == "virtual_server_group":
			c.notMapped(n, "no virtual_server uses this group")
			c.skipped(n.Children)
		case n.Keyword == "vrrp_script":
			c.notMapped(n, "no track_script names this script")
			c.skipped(n.Children)
		}
	}
	c.writeServices()
	c.unmapped(nodes)
	return c.res
}

// writeServices renders each service, keeping only those `lvsd check`
// accepts and that claim no VIP, protocol and port another service
// claimed first: a combination the conversion did not foresee is reported
// at the virtual_server instead of being written.
func (c *converter) writeServices() {
	claimed := map[string]string{}
	for _, s := range c.services {
		var claims []string
		for _, p := range s.ports {
			claims = append(claims, fmt.Sprintf("%s/%s/%d", s.vip, s.protocol, p))
		}
		if s.allPorts {
			claims = append(claims, fmt.Sprintf("%s/%s/all", s.vip, s.protocol))
		}
		clash := ""
		for _, k := range claims {
			if other, ok := claimed[k]; ok {
				clash = other
			}
		}
		for _, k := range claims {
			if other, ok := claimed[k]; !ok && clash == "" {
				claimed[k] = s.name
			} else if ok {
				clash = other
			}
		}
		if clash == "" && s.allPorts {
			for k, other := range claimed {
				if strings.HasPrefix(k, s.vip.String()+"/"+s.protocol+"/") && other != s.name {
					clash = other
				}
			}
		}
		if clash != "" {
			c.res.Note(s.at.File, s.at.Line, s.at.Keyword, importer.NotMapped, "VIP %s: service %s takes the same protocol and ports; lvsd balances each VIP, protocol and port with one service", s.vip, clash)
			continue
		}
		f := importer.File{Path: "services.d/" + s.file + ".yaml", Content: s.render()}
		check := importer.Result{Files: []importer.File{f}}
		if err := check.CheckServices(); err != nil {
			c.res.Note(s.at.File, s.at.Line, s.at.Keyword, importer.NotMapped, "VIP %s: lvsd check refuses the service it would become: %s", s.vip, strings.ReplaceAll(err.Error(), "\n", "; "))
			continue
		}
		c.res.Files = append(c.res.Files, f)
	}
}

// note reports n's keyword and marks it covered.
func (c *converter) note(n *Node, o importer.Outcome, format string, args ...any) {
	c.seen[n] = true
	c.res.Note(n.File, n.Line, n.Keyword, o, format, args...)
}

func (c *converter) mapped(n *Node, format string, args ...any) {
	c.note(n, importer.Mapped, format, args...)
}

func (c *converter) approx(n *Node, format string, args ...any) {
	c.note(n, importer.Approximated, format, args...)
}

func (c *converter) notMapped(n *Node, format string, args ...any) {
	c.note(n, importer.NotMapped, format, args...)
}

// unmapped reports every keyword no conversion step covered.
func (c *converter) unmapped(nodes []*Node) {
	for _, n := range nodes {
		if !c.seen[n] {
			why := notMappedWhy[n.Keyword]
			if why == "" {
				why = "lvsd has no equivalent"
			}
			c.notMapped(n, "%s", why)
			if len(n.Children) > 0 {
				c.skipped(n.Children)
			}
			continue
		}
		c.unmapped(n.Children)
	}
}

// skipped covers the statements of a block left out as a whole, each
// with its own line in the report.
func (c *converter) skipped(nodes []*Node) {
	for _, n := range nodes {
		if !c.seen[n] {
			c.notMapped(n, "inside a block that is not mapped")
		}
		c.skipped(n.Children)
	}
}

// notMappedWhy says why lvsd has no equivalent of a keyword, or what to do
// instead.
var notMappedWhy = map[string]string{
	"notification_email":       "lvsd sends no e-mail; watch its logs or use hooks.on_health / hooks.on_ownership",
	"notification_email_from":  "lvsd sends no e-mail",
	"smtp_server":              "lvsd sends no e-mail",
	"smtp_connect_timeout":     "lvsd sends no e-mail",
	"smtp_alert":               "lvsd sends no e-mail",
	"smtp_helo_name":           "lvsd sends no e-mail",
	"digest":                   "lvsd's http checks compare the status and a body substring, not an MD5 digest of the page",
	"quorum":                   "lvsd has no weight quorum; failover.ratio with failover backends is the closest (docs/health.md)",
	"hysteresis":               "lvsd has no weight quorum; health.rise and health.fall dampen flaps per backend",
	"quorum_up":                "lvsd runs no program on a quorum change; hooks.on_health runs one on each backend's change",
	"quorum_down":              "lvsd runs no program on a quorum change; hooks.on_health runs one on each backend's change",
	"ha_suspend":               "lvsd checks backends whether or not this director holds the VIP",
	"omega":                    "lvsd runs no program at shutdown",
	"static_ipaddress":         "lvsd holds only its services' VIPs; keep static addresses in the host's network configuration",
	"static_routes":            "lvsd adds no routes; keep them in the host's network configuration",
	"static_rules":             "lvsd adds no routing rules; keep them in the host's network configuration",
	"virtual_routes":           "lvsd adds no routes when it takes the VIPs; use hooks.on_ownership",
	"virtual_rules":            "lvsd adds no routing rules when it takes the VIPs; use hooks.on_ownership",
	"use_vmac":                 "lvsd moves VIPs with gratuitous ARP, not a virtual MAC",
	"garp_master_delay":        "lvsd sends its own gratuitous ARPs when it takes a VIP",
	"vrrp_garp_master_delay":   "lvsd sends its own gratuitous ARPs when it takes a VIP",
	"BFD_CHECK":                "lvsd has no BFD backend check; use a tcp or http check",
	"FILE_CHECK":               "lvsd has no file check; an exec check can test the file (command: [test, -e, FILE])",
	"ops":                      "lvsd does not turn on one-packet scheduling",
	"persistence_engine":       "lvsd has no persistence engine (SIP)",
	"lvs_flush":                "lvsd touches only the IPVS services it created (state_dir/owned.json)",
	"lvs_flush_on_stop":        "lvsd leaves its services in the kernel when it stops, so a restart drops no connection",
	"version":                  "lvsd's directors speak their own cluster protocol, not VRRP",
	"virtual_router_id":        "lvsd's directors speak their own cluster protocol, not VRRP",
	"regex":                    "lvsd's http checks look for a plain substring of the body (body:), not a regular expression",
	"http_protocol":            "lvsd's http checks speak HTTP/1.1",
	"fast_recovery":            "lvsd checks every url at every interval",
	"warmup":                   "lvsd spreads the first checks by itself",
	"bindto":                   "lvsd's checks leave from the director's routed address",
	"bind_port":                "lvsd's checks leave from a port the kernel picks",
	"bind_if":                  "lvsd's checks leave by the route to the backend",
	"connect_ip":               "lvsd's checks probe the backend's own address",
	"log_all_failures":         "lvsd logs every health transition (event=health)",
	"checker_log_all_failures": "lvsd logs every health transition (event=health)",
	"snmp_name":                "lvsd exports Prometheus metrics, not SNMP",
	"enable_traps":             "lvsd exports Prometheus metrics, not SNMP",
	"weight_reverse":           "lvsd does not change priorities by tracked items",
	"preempt_delay":            "lvsd preempts at once (cluster.preempt) when preempt is on",
	"track_process":            "lvsd tracks no processes; use a track.checks exec check",
	"track_file":               "lvsd tracks no files; use a track.checks exec check",
	"track_bfd":                "lvsd's track checks have no BFD; use ECMP with BGP and BFD (docs/ecmp.md)",
	"mcast_src_ip":             "lvsd's cluster listens on cluster.bind, unicast to cluster.peers",
	"vrrp_strict":              "lvsd's directors speak their own cluster protocol, not VRRP",
	"max_auto_priority":        "lvsd runs at cluster.nice in a cluster",
	"sh-port":                  "lvsd does not set the sh scheduler's flags; use scheduler mh with affinity none",
	"sh-fallback":              "lvsd does not set the sh scheduler's flags; use scheduler mh, which lvsd always gives mh-fallback",
	"flag-1":                   "lvsd sets the scheduler flags itself (mh-fallback with mh)",
	"flag-2":                   "lvsd sets the scheduler flags itself (mh-port with mh and affinity none)",
	"flag-3":                   "lvsd sets the scheduler flags itself",
}

// seconds reads a keepalived TIMER (seconds, possibly with a fraction).
func seconds(s string) (time.Duration, bool) {
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || f < 0 || f > 1e6 {
		return 0, false
	}
	return time.Duration(f * float64(time.Second)).Round(time.Millisecond), true
}

// argInt reads the n-th argument as a whole number in [lo, hi].
func argInt(n *Node, i, lo, hi int) (int, bool) {
	if len(n.Args) <= i {
		return 0, false
	}
	v, err := strconv.Atoi(n.Args[i])
	if err != nil || v < lo || v > hi {
		return 0, false
	}
	return v, true
}

// child returns the last statement of n with keyword kw (keepalived: the
// last one given wins).
func child(n *Node, kw string) *Node {
	var out *Node
	for _, ch := range n.Children {
		if ch.Keyword == kw {
			out = ch
		}
	}
	return out
}

func (c *converter) uniqueName(name string) string {
	taken := func(n string) bool {
		return slices.ContainsFunc(c.services, func(s *service) bool { return s.name == n })
	}
	out := name
	for i := 2; taken(out); i++ {
		out = fmt.Sprintf("%s-%d", name, i)
	}
	return out
}
