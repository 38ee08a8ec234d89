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

// service is one lvsd service being built from a virtual_server.
type service struct {
	name, file  string
	from        string // "file:line (virtual_server ...)" for the header
	at          *Node  // the virtual_server
	vip         netip.Addr
	protocol    string
	ports       []int // empty with allPorts
	allPorts    bool
	forwarding  string
	tunnel      string // the tunnel block in YAML flow form, "" for none
	scheduler   string
	schedNote   string
	affinity    string
	persistence time.Duration
	netmask     int
	sorry       string
	health      *health // the service's (every backend's checks alike)
	backends    []*backend
}

type backend struct {
	addr         netip.Addr
	port         int
	weight       int
	upper, lower int
	health       *health
}

// vsSettings are a virtual_server's settings before they are copied into
// a service per VIP.
type vsSettings struct {
	protocol, forwarding, tunnel, scheduler, schedNote, affinity string
	tunnelAt                                                     *Node // the lb_kind that set tunnel
	persistence                                                  time.Duration
	netmask                                                      int
	sorryAddr                                                    netip.Addr
	sorryPort                                                    int
	timers                                                       timers
	// port is the one port of every VIP of the virtual server (0: they
	// differ, or one has several or all).
	port int
	// onePortEach: every VIP of the virtual server has exactly one port,
	// so each service has one, and a NAT backend may have its own port
	// (a virtual_server_group's VIPs may have different ones).
	onePortEach bool
}

// target is one VIP of a virtual_server with its ports.
type target struct {
	vip      netip.Addr
	ports    []int
	allPorts bool
}

func (c *converter) virtualServer(n *Node) {
	targets, ok := c.targets(n)
	if !ok {
		c.skipped(n.Children)
		return
	}
	set := c.vsSettings(n)
	set.port = commonPort(targets)
	set.onePortEach = !slices.ContainsFunc(targets, func(t target) bool { return t.allPorts || len(t.ports) != 1 })
	var backends []*backend
	for _, rs := range n.Children {
		if rs.Keyword == "real_server" {
			if b := c.realServer(rs, set); b != nil {
				backends = append(backends, b)
			}
		}
	}
	if len(backends) == 0 {
		c.approx(n, "no real_server could be mapped, so no service was written (lvsd needs at least one backend)")
		return
	}
	slices.SortFunc(backends, func(a, b *backend) int { return a.addr.Compare(b.addr) })
	backends = slices.CompactFunc(backends, func(a, b *backend) bool { return a.addr == b.addr })
	for _, t := range targets {
		c.addService(n, t, set, backends)
	}
}

// targets reads the VIPs and ports a virtual_server names: directly, or
// through a virtual_server_group.
func (c *converter) targets(n *Node) ([]target, bool) {
	switch {
	case len(n.Args) == 2 && n.Args[0] == "fwmark":
		c.notMapped(n, "lvsd gives each service its own firewall mark and sets it in its own nftables table: rewrite the rules that set mark %s as the service's ports, port ranges or `ports: [all]`", n.Args[1])
		return nil, false
	case len(n.Args) == 2 && n.Args[0] == "group":
		g := c.groups[n.Args[1]]
		if g == nil {
			c.notMapped(n, "virtual_server_group %s is not defined", n.Args[1])
			return nil, false
		}
		ts := c.groupTargets(g)
		if len(ts) == 0 {
			c.notMapped(n, "virtual_server_group %s has no address lvsd can take", n.Args[1])
			return nil, false
		}
		c.mapped(n, "one service per VIP of group %s (%d)", n.Args[1], len(ts))
		return ts, true
	case len(n.Args) == 1 || len(n.Args) == 2:
		vip, err := netip.ParseAddr(n.Args[0])
		if err != nil {
			c.notMapped(n, "%q is not an IP address", n.Args[0])
			return nil, false
		}
		t := target{vip: vip.Unmap()}
		if why := badVIP(t.vip); why != "" {
			c.notMapped(n, "%s %s", t.vip, why)
			return nil, false
		}
		if len(n.Args) == 1 {
			t.allPorts = true
			c.approx(n, "a virtual server without a port takes every port: ports: [all] (lvsd marks the VIP's packets and balances them as one firewall-mark service)")
			return []target{t}, true
		}
		p, ok := argInt(n, 1, 0, 65535)
		switch {
		case !ok:
			c.notMapped(n, "port %q is not a port", n.Args[1])
			return nil, false
		case p == 0:
			t.allPorts = true
			c.approx(n, "port 0 takes every port: ports: [all] (one firewall-mark service in lvsd)")
		default:
			t.ports = []int{p}
			c.mapped(n, "a service of VIP %s, port %d", t.vip, p)
		}
		return []target{t}, true
	}
	c.notMapped(n, "virtual_server takes IP [PORT], fwmark N or group NAME")
	return nil, false
}

// groupTargets reads a virtual_server_group's addresses, ranges and ports,
// one target per VIP.
func (c *converter) groupTargets(g *Node) []target {
	c.mapped(g, "its addresses become the VIPs of the services of the virtual servers that use it")
	byVIP := map[netip.Addr]*target{}
	var order []netip.Addr
	for _, e := range g.Children {
		if e.Keyword == "fwmark" {
			c.notMapped(e, "lvsd gives each service its own firewall mark: rewrite the rules that set mark %s as ports or port ranges of the service", strings.Join(e.Args, " "))
			continue
		}
		addrs, err := expandRange(e.Keyword)
		if err != nil {
			c.notMapped(e, "%v", err)
			continue
		}
		port := 0
		if len(e.Args) > 0 {
			p, ok := argInt(e, 0, 0, 65535)
			if !ok {
				c.notMapped(e, "port %q is not a port", e.Args[0])
				continue
			}
			port = p
		}
		if why := badVIP(addrs[0]); why != "" {
			c.notMapped(e, "%s %s", addrs[0], why)
			continue
		}
		for _, a := range addrs {
			t := byVIP[a]
			if t == nil {
				t = &target{vip: a}
				byVIP[a] = t
				order = append(order, a)
			}
			if port == 0 {
				t.allPorts = true
			} else if !slices.Contains(t.ports, port) {
				t.ports = append(t.ports, port)
			}
		}
		if len(addrs) > 1 {
			c.mapped(e, "%d VIPs, one service each", len(addrs))
		} else {
			c.mapped(e, "VIP %s", addrs[0])
		}
	}
	var out []target
	for _, a := range order {
		t := *byVIP[a]
		if t.allPorts {
			t.ports = nil
		}
		slices.Sort(t.ports)
		out = append(out, t)
	}
	return out
}

// vsSettings reads a virtual_server's own settings (not its real servers).
func (c *converter) vsSettings(n *Node) vsSettings {
	set := vsSettings{protocol: "tcp", forwarding: "nat", scheduler: defaultScheduler, timers: defaultTimers()}
	algo := false
	mhPort := false
	for _, ch := range n.Children {
		switch ch.Keyword {
		case "protocol":
			if len(ch.Args) == 1 && slices.Contains([]string{"tcp", "udp", "sctp"}, strings.ToLower(ch.Args[0])) {
				set.protocol = strings.ToLower(ch.Args[0])
				c.mapped(ch, "protocol: %s", set.protocol)
			} else {
				c.notMapped(ch, "protocol takes TCP, UDP or SCTP")
			}
		case "lb_algo", "lvs_sched":
			if len(ch.Args) != 1 {
				c.notMapped(ch, "%s takes one scheduler", ch.Keyword)
				continue
			}
			set.scheduler, algo = ch.Args[0], true
			c.mapped(ch, "scheduler: %s", c.scheduler(set.scheduler))
		case "lb_kind", "lvs_method":
			c.forwarding(ch, &set)
		case "persistence_timeout":
			set.persistence = defaultPersistence
			if len(ch.Args) > 0 {
				d, ok := seconds(ch.Args[0])
				if !ok || d < time.Second {
					c.notMapped(ch, "%q is not a timeout in seconds (at least 1)", ch.Args[0])
					continue
				}
				set.persistence = d.Truncate(time.Second)
				c.mapped(ch, "persistence.timeout: %s", importer.Duration(set.persistence))
			} else {
				c.mapped(ch, "persistence.timeout: 6m (keepalived's default)")
			}
		case "persistence_granularity":
			bits, ok := maskBits(ch.Args)
			if !ok {
				c.notMapped(ch, "%q is not a netmask like 255.255.255.0 or a prefix length", strings.Join(ch.Args, " "))
				continue
			}
			set.netmask = bits
			c.mapped(ch, "persistence.netmask: %d", bits)
		case "sorry_server":
			c.sorryServer(ch, &set)
		case "sorry_server_inhibit":
			c.mapped(ch, "lvsd always keeps a sorry server at weight 0 while a backend is eligible, and lets its connections finish")
		case "sorry_server_lvs_method":
			c.approx(ch, "lvsd gives the sorry server the service's forwarding (%s)", set.forwarding)
		case "inhibit_on_failure":
			c.mapped(ch, "lvsd always keeps a failed backend at weight 0 instead of deleting it, so its connections go on")
		case "mh-port":
			mhPort = true
			c.mapped(ch, "affinity: none (lvsd sets mh-port)")
		case "mh-fallback":
			c.mapped(ch, "lvsd always sets mh-fallback with scheduler mh")
		case "ip_family":
			c.mapped(ch, "the family of the VIP")
		case "delay_loop", "connect_timeout", "retry", "nb_get_retry", "delay_before_retry", "virtualhost", "alpha", "warmup":
			c.timer(ch, &set.timers)
		}
	}
	if set.scheduler == "mh" {
		set.affinity = "client-ip"
		if mhPort {
			set.affinity = "none"
		}
	}
	if c.opt.Scheduler != "" && set.scheduler != c.opt.Scheduler {
		set.schedNote = fmt.Sprintf("keepalived's scheduler was %s; Maglev keeps a client on its backend on every director", set.scheduler)
		set.scheduler = c.opt.Scheduler
		set.affinity = ""
	} else if !algo {
		set.schedNote = "keepalived's default scheduler; lvsd's default is mh (Maglev)"
	} else if set.scheduler != "mh" {
		set.schedNote = "as in keepalived.conf; lvsd's default is mh (Maglev)"
	}
	if set.persistence == 0 && set.netmask != 0 {
		set.netmask = 0
	}
	return set
}

func (c *converter) scheduler(s string) string {
	if c.opt.Scheduler != "" && c.opt.Scheduler != s {
		return c.opt.Scheduler + " (--scheduler; keepalived's was " + s + ")"
	}
	return s
}

// addService makes the service of one VIP of a virtual_server.
func (c *converter) addService(n *Node, t target, set vsSettings, backends []*backend) {
	port := 0
	if len(t.ports) == 1 {
		port = t.ports[0]
	}
	name := c.uniqueName(importer.ServiceName(t.vip, port, set.protocol))
	s := &service{name: name, file: name, vip: t.vip, protocol: set.protocol, ports: t.ports, allPorts: t.allPorts,
		forwarding: set.forwarding, tunnel: set.tunnel, scheduler: set.scheduler, schedNote: set.schedNote,
		affinity: set.affinity, persistence: set.persistence, netmask: set.netmask, at: n,
		from: fmt.Sprintf("%s (virtual_server %s)", n.Where(), strings.Join(n.Args, " "))}
	single := !t.allPorts && len(t.ports) == 1
	if t.vip.Is6() && s.tunnel != "" {
		s.tunnel = ""
		at := set.tunnelAt
		c.res.Note(at.File, at.Line, at.Keyword, importer.Approximated, "VIP %s: an IPv6 service tunnels with ipip (IPv6-in-IPv6); gue and gre are for IPv4", t.vip)
	}
	for _, b := range backends {
		if b.addr.Is4() != t.vip.Is4() && set.forwarding != "tunnel" {
			continue
		}
		cp := *b
		if cp.port != 0 && (!single || cp.port == port || set.forwarding != "nat") {
			cp.port = 0
		}
		s.backends = append(s.backends, &cp)
	}
	if len(s.backends) == 0 {
		c.res.Note(n.File, n.Line, n.Keyword, importer.NotMapped, "VIP %s: no real server of its address family", t.vip)
		return
	}
	if set.sorryAddr.IsValid() && !slices.ContainsFunc(s.backends, func(b *backend) bool { return b.addr == set.sorryAddr }) {
		s.sorry = set.sorryAddr.String()
		if set.sorryPort != 0 && set.sorryPort != port && single && set.forwarding == "nat" {
			s.sorry = netip.AddrPortFrom(set.sorryAddr, uint16(set.sorryPort)).String()
		}
	}
	s.hoistHealth()
	c.services = append(c.services, s)
	if _, ok := c.vips[t.vip]; !ok {
		c.vips[t.vip] = s.name
	}
}

// hoistHealth moves the backends' checks to the service when every
// backend has the same.
func (s *service) hoistHealth() {
	first := s.backends[0].health
	if first == nil {
		return
	}
	for _, b := range s.backends[1:] {
		if b.health == nil || b.health.key() != first.key() {
			return
		}
	}
	s.health = first
	for _, b := range s.backends {
		b.health = nil
	}
}

// render writes the service file.
func (s *service) render() string {
	var w importer.Writer
	w.Comment(0, "Imported from "+s.from+".")
	w.Key(0, "service", importer.Text(s.name), "")
	w.Key(0, "vip", importer.Text(s.vip.String()), "")
	w.Key(0, "protocol", s.protocol, "")
	if s.allPorts {
		w.Key(0, "ports", "[all]", "")
	} else {
		ps := make([]string, len(s.ports))
		for i, p := range s.ports {
			ps[i] = strconv.Itoa(p)
		}
		w.Key(0, "ports", importer.List(ps), "")
	}
	fwdNote := ""
	if s.forwarding != "dr" {
		fwdNote = "lvsd's default is dr"
	}
	w.Key(0, "forwarding", s.forwarding, fwdNote)
	if s.tunnel != "" {
		w.Key(0, "tunnel", s.tunnel, "")
	}
	w.Key(0, "scheduler", s.scheduler, s.schedNote)
	if s.affinity != "" && s.affinity != "none" {
		w.Key(0, "affinity", s.affinity, "mh without mh-port hashes the client address only")
	}
	if s.persistence > 0 {
		if s.netmask > 0 {
			w.Key(0, "persistence", fmt.Sprintf("{timeout: %s, netmask: %d}", importer.Duration(s.persistence), s.netmask), "")
		} else {
			w.Key(0, "persistence", fmt.Sprintf("{timeout: %s}", importer.Duration(s.persistence)), "")
		}
	}
	if s.sorry != "" {
		w.Key(0, "sorry_server", importer.Text(s.sorry), "")
	}
	if s.health != nil {
		s.health.render(&w, 0)
	}
	w.Key(0, "backends", "", "")
	for _, b := range s.backends {
		fields := []string{"address: " + importer.Text(b.addr.String())}
		if b.port != 0 {
			fields = append(fields, "port: "+strconv.Itoa(b.port))
		}
		fields = append(fields, "weight: "+strconv.Itoa(b.weight))
		if b.upper > 0 {
			fields = append(fields, "upper_threshold: "+strconv.Itoa(b.upper))
			if b.lower > 0 && b.lower <= b.upper {
				fields = append(fields, "lower_threshold: "+strconv.Itoa(b.lower))
			}
		}
		if b.health == nil {
			w.Item(2, "{"+strings.Join(fields, ", ")+"}", "")
			continue
		}
		w.Item(2, fields[0], "")
		for _, f := range fields[1:] {
			w.Raw("    " + f + "\n")
		}
		b.health.render(&w, 4)
	}
	return w.String()
}
