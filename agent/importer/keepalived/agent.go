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

// hookNote is a notify program keepalived runs, kept as a comment of the
// agent file: lvsd's hooks get other arguments (LVSD_* variables), so the
// program must be adapted before it is named.
type hookNote struct {
	key, program, where string
}

func (c *converter) hookNote(n *Node, key string) {
	if len(n.Args) == 0 {
		c.notMapped(n, "names no program")
		return
	}
	c.hooks = append(c.hooks, hookNote{key: key, program: strings.Join(strings.Fields(strings.Join(n.Args, " ")), " "), where: n.Where()})
	c.approx(n, "hooks.%s, written commented out: lvsd runs the program with LVSD_EVENT and other LVSD_* variables, not keepalived's arguments — adapt it, then name it", key)
}

// agentSettings is what the agent file gets from global_defs and the
// vrrp_instances.
type agentSettings struct {
	node          string
	nodeFrom      string // "router_id" when global_defs named it
	iface         string
	ifaceFrom     string
	cluster       bool
	priority      int
	preempt       bool
	peers         []string
	bind          string
	label         string
	heartbeat     time.Duration
	failure       time.Duration
	connSync      bool
	timeouts      []string // "tcp: 60s"
	trackCommands [][]string
	trackTimers   struct {
		interval, timeout time.Duration
		rise, fall        int
	}
}

func (c *converter) agentFile(nodes []*Node) {
	a := agentSettings{node: c.opt.Node, priority: 100, preempt: true}
	if c.opt.Cluster == ClusterVRRP {
		c.vrrpModeGlobal(nodes)
	}
	for _, n := range nodes {
		switch n.Keyword {
		case "global_defs":
			c.globalDefs(n, &a)
		case "vrrp_instance":
			if c.opt.Cluster == ClusterVRRP {
				c.vrrpModeInstance(n, &a)
			} else {
				c.vrrpInstance(n, &a)
			}
		case "vrrp_sync_group":
			if c.opt.Cluster == ClusterVRRP {
				c.mapped(n, "lvsd's virtual router of each address family moves every VIP of the family together")
			} else {
				c.mapped(n, "lvsd's active-standby cluster moves every VIP together")
			}
			for _, ch := range n.Children {
				if c.opt.Cluster == ClusterVRRP {
					c.mapped(ch, "in the virtual routers")
				} else {
					c.mapped(ch, "in the one cluster")
				}
				c.skipped(ch.Children)
			}
		}
	}
	c.res.Files = append([]importer.File{{Path: "lvsd.yaml", Content: c.renderAgent(a)}}, c.res.Files...)
}

func (c *converter) globalDefs(n *Node, a *agentSettings) {
	c.mapped(n, "the agent file")
	for _, ch := range n.Children {
		switch ch.Keyword {
		case "router_id":
			if len(ch.Args) == 1 {
				a.node, a.nodeFrom = ch.Args[0], "keepalived's router_id"
				c.mapped(ch, "node: %s", a.node)
			}
		case "lvs_sync_daemon":
			c.syncDaemon(ch, a)
		case "lvs_timeouts":
			c.lvsTimeouts(ch, a)
		case "default_interface":
			if len(ch.Args) == 1 && a.iface == "" {
				a.iface, a.ifaceFrom = ch.Args[0], ch.Where()
				c.mapped(ch, "interface: %s, unless a vrrp_instance names one", a.iface)
			}
		case "vrrp_priority":
			if v, ok := argInt(ch, 0, -20, 19); ok {
				c.approx(ch, "cluster.nice is lvsd's (default -10); keepalived's vrrp_priority %d is not copied", v)
			}
		case "vrrp_version":
			if c.opt.Cluster == ClusterVRRP {
				c.vrrpVersionGlobal(ch)
			}
		case "script_user":
			c.notMapped(ch, "hooks run as root; exec checks as the service file's user:")
		}
	}
}

func (c *converter) syncDaemon(n *Node, a *agentSettings) {
	if c.opt.Cluster == ClusterVRRP {
		c.notMapped(n, "mode vrrp does not sync connections, and keepalived's sync daemon does not talk to lvsd's relay (docs/migrating-from-keepalived.md, \"Connections during the move\")")
		return
	}
	a.connSync = true
	c.mapped(n, "cluster.conn_sync (on by default in a cluster): lvsd runs the kernel's sync daemons on lo and relays their records over the encrypted cluster")
}

func (c *converter) lvsTimeouts(n *Node, a *agentSettings) {
	keys := map[string]string{"tcp": "tcp", "tcpfin": "tcp_fin", "udp": "udp"}
	for i := 0; i+1 < len(n.Args); i += 2 {
		key, ok := keys[n.Args[i]]
		d, ok2 := seconds(n.Args[i+1])
		if !ok || !ok2 || d < time.Second {
			c.notMapped(n, "%q is not tcp|tcpfin|udp SECONDS", n.Args[i]+" "+n.Args[i+1])
			return
		}
		a.timeouts = append(a.timeouts, key+": "+importer.Duration(d.Truncate(time.Second)))
	}
	c.mapped(n, "ipvs.timeouts: {%s}", strings.Join(a.timeouts, ", "))
}

func (c *converter) vrrpInstance(n *Node, a *agentSettings) {
	first := !a.cluster
	a.cluster = true
	if first {
		c.mapped(n, "the cluster block: lvsd's directors elect the VIP holder themselves (active-standby)")
	} else {
		c.approx(n, "lvsd's cluster holds every VIP on one director: the VIPs of this instance move with the others")
	}
	for _, ch := range n.Children {
		arg := ""
		if len(ch.Args) > 0 {
			arg = ch.Args[0]
		}
		switch ch.Keyword {
		case "interface":
			switch {
			case first:
				a.iface, a.ifaceFrom = arg, ch.Where()
				c.mapped(ch, "interface: %s (it holds the VIPs)", arg)
			case arg == a.iface:
				c.mapped(ch, "interface: %s", arg)
			default:
				c.approx(ch, "lvsd puts every VIP on one interface: %s", a.iface)
			}
		case "state":
			c.mapped(ch, "the holder is elected by cluster.priority; the state at start is not configured")
		case "priority":
			p, ok := argInt(ch, 0, 1, 255)
			switch {
			case !ok:
				c.notMapped(ch, "%q is not a priority (1-255)", arg)
			case first:
				a.priority = p
				c.mapped(ch, "cluster.priority: %d", p)
			case p == a.priority:
				c.mapped(ch, "cluster.priority: %d", p)
			default:
				c.approx(ch, "lvsd has one priority per director: cluster.priority %d", a.priority)
			}
		case "nopreempt":
			a.preempt = false
			c.mapped(ch, "cluster.preempt: false")
		case "advert_int":
			d, ok := seconds(arg)
			if !ok || d <= 0 {
				c.notMapped(ch, "%q is not a time in seconds", arg)
				continue
			}
			if first {
				a.heartbeat, a.failure = vrrpTimers(d, a.priority)
			}
			c.approx(ch, "cluster.heartbeat_interval %s and failure_timeout %s: a failed holder is replaced about as fast as keepalived's master down interval (3 adverts)", importer.Duration(a.heartbeat), importer.Duration(a.failure))
		case "unicast_peer":
			c.mapped(ch, "cluster.peers")
			for _, p := range ch.Children {
				if addr, err := netip.ParseAddr(p.Keyword); err == nil {
					if !slices.Contains(a.peers, addr.String()) {
						a.peers = append(a.peers, addr.String())
					}
					c.mapped(p, "a peer; lvsd's cluster port is 7946, not VRRP")
				} else {
					c.notMapped(p, "%q is not an IP address", p.Keyword)
				}
			}
		case "unicast_src_ip":
			if addr, err := netip.ParseAddr(arg); err == nil {
				a.bind = addr.String()
				c.mapped(ch, "cluster.bind: %s", a.bind)
			}
		case "authentication":
			c.approx(ch, "lvsd encrypts and authenticates the cluster with the key in cluster.key_file (a random key of 16-32 bytes, base64), not a password")
			c.skipped(ch.Children)
		case "virtual_router_id":
			if first && arg != "" {
				a.label = "vrid-" + arg
			}
			c.approx(ch, "cluster.label %s separates this cluster from others on the network, as the router id did", a.label)
		case "virtual_ipaddress", "virtual_ipaddress_excluded":
			c.virtualIPs(ch)
		default:
			c.instanceCommon(ch, a)
		}
	}
}

// instanceCommon reports the keywords of a vrrp_instance that map the same
// whichever cluster mode the import writes: tracking, notify scripts, the
// sync daemon's interface.
func (c *converter) instanceCommon(ch *Node, a *agentSettings) {
	switch ch.Keyword {
	case "track_interface":
		c.trackInterface(ch, a)
	case "track_script":
		c.trackScript(ch, a)
	case "notify_master", "notify_backup", "notify_fault", "notify_stop", "notify":
		c.hookNote(ch, "on_ownership")
	case "lvs_sync_daemon_interface":
		c.syncDaemon(ch, a)
	case "dont_track_primary":
		c.notMapped(ch, "lvsd always follows its interface: a director whose interface is down gives its VIPs up")
	}
}

// vrrpTimers chooses heartbeat and failure timeout for advert_int d:
// keepalived's master down interval is 3 adverts plus a skew.
func vrrpTimers(d time.Duration, priority int) (time.Duration, time.Duration) {
	heartbeat := min(d, time.Second)
	failure := 3*d + time.Duration(256-priority)*d/256
	return heartbeat, min(max(failure.Round(10*time.Millisecond), 3*heartbeat), time.Minute)
}

func (c *converter) virtualIPs(n *Node) {
	c.mapped(n, "the VIPs are the services' vip:")
	for _, v := range n.Children {
		addr, err := netip.ParseAddr(strings.SplitN(v.Keyword, "/", 2)[0])
		if err != nil {
			c.notMapped(v, "%q is not an address", v.Keyword)
			continue
		}
		addr = addr.Unmap()
		extra := ""
		if len(v.Args) > 0 {
			extra = " (" + strings.Join(v.Args, " ") + " is not kept: lvsd puts the VIP on interface as /32 or /128)"
		}
		if name, ok := c.vips[addr]; ok {
			c.mapped(v, "vip of service %s%s", name, extra)
		} else {
			c.notMapped(v, "no virtual_server uses %s: lvsd holds only the VIPs of its services; put it in the host's network configuration or add a service%s", addr, c.vrrpAddressAdvice())
		}
	}
}

func (c *converter) trackInterface(n *Node, a *agentSettings) {
	c.mapped(n, "lvsd follows its interface")
	for _, i := range n.Children {
		if i.Keyword == a.iface {
			c.mapped(i, "the director gives its VIPs up while interface %s is down", a.iface)
		} else {
			c.notMapped(i, "lvsd follows only its own interface (%s); a track.checks exec check can test %s (command: [/bin/sh, -c, \"ip link show %s up | grep -q UP\"])", a.iface, i.Keyword, i.Keyword)
		}
	}
}

// trackScript turns each vrrp_script named into a track exec check.
func (c *converter) trackScript(n *Node, a *agentSettings) {
	c.mapped(n, "track.checks")
	for _, ref := range n.Children {
		s := c.scripts[ref.Keyword]
		if s == nil {
			c.notMapped(ref, "vrrp_script %s is not defined", ref.Keyword)
			continue
		}
		cmd := child(s, "script")
		if cmd == nil {
			c.notMapped(ref, "vrrp_script %s has no script", ref.Keyword)
			continue
		}
		words, err := splitCommand(strings.Join(cmd.Args, " "))
		if err != nil || len(words) == 0 {
			c.notMapped(ref, "the script of vrrp_script %s is not a command line", ref.Keyword)
			continue
		}
		if !c.seen[s] {
			c.trackTimers(s, a)
			c.mapped(cmd, "command: %s (an exec check, run without a shell)", importer.Texts(words))
		}
		a.trackCommands = append(a.trackCommands, words)
		c.approx(ref, "a track exec check: while it fails the director gives its VIPs up (keepalived changed the priority by the script's weight, or went to FAULT)")
	}
}

func (c *converter) trackTimers(s *Node, a *agentSettings) {
	c.mapped(s, "a track exec check")
	t := &a.trackTimers
	for _, ch := range s.Children {
		switch ch.Keyword {
		case "interval", "timeout":
			d, ok := seconds(strings.Join(ch.Args, ""))
			if !ok || d <= 0 {
				c.notMapped(ch, "not a time in seconds")
				continue
			}
			if ch.Keyword == "interval" {
				t.interval = max(d, 100*time.Millisecond)
			} else {
				t.timeout = d
			}
			c.mapped(ch, "track.%s", ch.Keyword)
		case "rise", "fall":
			v, ok := argInt(ch, 0, 1, 100)
			if !ok {
				c.notMapped(ch, "not 1-100")
				continue
			}
			if ch.Keyword == "rise" {
				t.rise = v
			} else {
				t.fall = v
			}
			c.mapped(ch, "track.%s: %d", ch.Keyword, v)
		case "weight":
			c.approx(ch, "lvsd gives the VIPs up while the check fails instead of changing the priority")
		case "user":
			c.notMapped(ch, "track checks run as lvsd's account")
		}
	}
}

func (c *converter) renderAgent(a agentSettings) string {
	var w importer.Writer
	w.Comment(0, "The agent file, imported from keepalived.conf. See docs/configuration.md and docs/migrating-from-keepalived.md.")
	if a.node != "" {
		w.Key(0, "node", importer.Text(a.node), a.nodeFrom)
	}
	w.Key(0, "role", "director", "")
	if a.iface == "" {
		w.Key(0, "interface", "eth0", "keepalived.conf names no interface: set the one that holds the VIPs")
	} else {
		w.Key(0, "interface", importer.Text(a.iface), "where the VIPs go")
	}
	w.Key(0, "services_dir", "services.d", "relative to this file")
	if len(a.timeouts) > 0 {
		w.Key(0, "ipvs", "", "")
		w.Key(2, "timeouts", "{"+strings.Join(a.timeouts, ", ")+"}", "keepalived's lvs_timeouts")
	}
	if a.cluster && c.opt.Cluster == ClusterVRRP {
		c.renderVRRP(&w, a)
	} else if a.cluster {
		w.Key(0, "cluster", "", "")
		w.Key(2, "key_file", importer.Text(c.opt.KeyFile), "create it: head -c 32 /dev/urandom | base64 > FILE; chmod 600 FILE")
		if len(a.peers) > 0 {
			w.Key(2, "peers", importer.Texts(a.peers), "keepalived's unicast_peer")
		} else {
			w.Comment(2, "peers: [the other directors' addresses]   # keepalived used multicast; lvsd's directors join each other by address")
		}
		if a.bind != "" {
			w.Key(2, "bind", importer.Text(a.bind), "keepalived's unicast_src_ip")
		}
		if a.label != "" {
			w.Key(2, "label", importer.Text(a.label), "keepalived's virtual_router_id")
		}
		w.Key(2, "mode", "active-standby", "one director holds the VIPs, as a VRRP master")
		w.Key(2, "priority", strconv.Itoa(a.priority), "the live director with the highest holds the VIPs")
		if !a.preempt {
			w.Key(2, "preempt", "false", "keepalived's nopreempt")
		}
		if a.heartbeat > 0 {
			w.Key(2, "heartbeat_interval", importer.Duration(a.heartbeat), "from keepalived's advert_int")
			w.Key(2, "failure_timeout", importer.Duration(a.failure), "keepalived's master down interval")
		}
		w.Key(2, "conn_sync", "{enabled: true}", "IPVS connection sync over the cluster (keepalived's lvs_sync_daemon)")
	}
	if len(a.trackCommands) > 0 {
		t := a.trackTimers
		w.Key(0, "track", "", "keepalived's track_script")
		if t.interval > 0 {
			w.Key(2, "interval", importer.Duration(t.interval), "")
			if t.timeout > 0 {
				w.Key(2, "timeout", importer.Duration(min(t.timeout, t.interval)), "")
			} else {
				w.Key(2, "timeout", importer.Duration(t.interval), "")
			}
		}
		if t.rise > 0 {
			w.Key(2, "rise", strconv.Itoa(t.rise), "")
		}
		if t.fall > 0 {
			w.Key(2, "fall", strconv.Itoa(t.fall), "")
		}
		w.Key(2, "checks", "", "")
		for _, cmd := range a.trackCommands {
			w.Item(4, "{type: exec, command: "+importer.Texts(cmd)+"}", "")
		}
	}
	if len(c.hooks) > 0 {
		w.Comment(0, "keepalived ran these programs; lvsd's hooks get LVSD_* variables instead of keepalived's\narguments (docs/operations.md, \"Event hooks\"). Adapt a program, then name it:")
		w.Comment(0, "hooks:")
		done := map[string]bool{}
		for _, h := range c.hooks {
			if done[h.key+h.program] {
				continue
			}
			done[h.key+h.program] = true
			w.Comment(0, fmt.Sprintf("  %s: %s   # from %s", h.key, h.program, h.where))
		}
	}
	return w.String()
}
