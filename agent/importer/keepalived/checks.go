package keepalived

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/lvsd/lvsd/agent/importer"
)

// timers are the checker settings a virtual server passes to its real
// servers and a real server to its checkers.
type timers struct {
	delayLoop, connTimeout time.Duration
	retry                  int
	virtualhost            string
}

func defaultTimers() timers {
	return timers{delayLoop: defaultDelayLoop, connTimeout: defaultConnTimeout, retry: defaultRetry}
}

// timer reads one inherited checker setting into t.
func (c *converter) timer(n *Node, t *timers) {
	arg := ""
	if len(n.Args) > 0 {
		arg = n.Args[0]
	}
	switch n.Keyword {
	case "delay_loop":
		d, ok := seconds(arg)
		if !ok || d <= 0 {
			c.notMapped(n, "%q is not a time in seconds", arg)
			return
		}
		t.delayLoop = d
		c.mapped(n, "health.interval: %s (keepalived's default 60s; lvsd's 2s)", importer.Duration(max(d, 100*time.Millisecond)))
	case "connect_timeout":
		d, ok := seconds(arg)
		if !ok || d <= 0 {
			c.notMapped(n, "%q is not a time in seconds", arg)
			return
		}
		t.connTimeout = d
		c.mapped(n, "health.timeout: %s (keepalived's default 5s; lvsd's 1s); at most the interval", importer.Duration(d))
	case "retry", "nb_get_retry":
		r, ok := argInt(n, 0, 0, 99)
		if !ok {
			c.notMapped(n, "%q is not a retry count (0-99)", arg)
			return
		}
		t.retry = r
		c.mapped(n, "health.fall: %d (the first failure and %d retries)", r+1, r)
	case "delay_before_retry":
		c.approx(n, "lvsd checks again at the next interval, not after delay_before_retry; health.fall counts the failed rounds")
	case "virtualhost":
		t.virtualhost = arg
		c.mapped(n, "host: of the http checks")
	case "alpha":
		c.approx(n, "lvsd decides a backend's health at its first check round, so a dead backend takes no connection for long either way")
	case "warmup":
		c.notMapped(n, "%s", notMappedWhy["warmup"])
	}
}

// realServer reads one real_server with its checkers.
func (c *converter) realServer(n *Node, set vsSettings) *backend {
	if len(n.Args) < 1 || len(n.Args) > 2 {
		c.notMapped(n, "real_server takes IP [PORT]")
		c.skipped(n.Children)
		return nil
	}
	addr, err := netip.ParseAddr(n.Args[0])
	if err != nil {
		c.notMapped(n, "%q is not an IP address", n.Args[0])
		c.skipped(n.Children)
		return nil
	}
	b := &backend{addr: addr.Unmap(), weight: 1}
	if len(n.Args) == 2 {
		p, ok := argInt(n, 1, 0, 65535)
		if !ok {
			c.notMapped(n, "port %q is not a port", n.Args[1])
			c.skipped(n.Children)
			return nil
		}
		b.port = p
	}
	switch {
	case b.port == 0 || b.port == set.port:
		c.mapped(n, "backend %s", b.addr)
	case set.forwarding == "nat" && set.onePortEach:
		c.mapped(n, "backend %s, port: %d where it differs from the service's port", b.addr, b.port)
	case set.forwarding == "nat":
		c.approx(n, "backend %s: a NAT backend of a service with several ports gets the client's destination port, not %d (its checks keep port %d)", b.addr, b.port, b.port)
	default:
		c.approx(n, "backend %s: %s forwarding cannot change the port, the backend gets the client's destination port, not %d (its checks keep port %d)", b.addr, set.forwarding, b.port, b.port)
	}
	t := set.timers
	for _, ch := range n.Children {
		switch ch.Keyword {
		case "delay_loop", "connect_timeout", "retry", "nb_get_retry", "delay_before_retry", "virtualhost", "alpha", "warmup":
			c.timer(ch, &t)
		}
	}
	var checks []check
	for _, ch := range n.Children {
		switch ch.Keyword {
		case "weight":
			w, ok := argInt(ch, 0, 0, 65535)
			if !ok {
				c.notMapped(ch, "%q is not a weight (0-65535)", strings.Join(ch.Args, " "))
				continue
			}
			b.weight = w
			c.mapped(ch, "weight: %d", w)
		case "uthreshold":
			if v, ok := argInt(ch, 0, 1, 1<<31-1); ok {
				b.upper = v
				c.mapped(ch, "upper_threshold: %d", v)
			} else if v, ok := argInt(ch, 0, 0, 0); ok && v == 0 {
				c.mapped(ch, "0: no upper threshold, lvsd's default")
			} else {
				c.notMapped(ch, "%q is not a connection count", strings.Join(ch.Args, " "))
			}
		case "lthreshold":
			if v, ok := argInt(ch, 0, 1, 1<<31-1); ok {
				b.lower = v
				c.mapped(ch, "lower_threshold: %d (needs uthreshold, at most it)", v)
			} else {
				c.mapped(ch, "0: lvsd's default (three quarters of the upper threshold)")
			}
		case "lvs_method":
			if len(ch.Args) > 0 && methodOf(ch.Args[0]) != set.forwarding {
				c.approx(ch, "lvsd forwards to every backend of a service the same way: forwarding %s", set.forwarding)
			} else {
				c.mapped(ch, "the service's forwarding")
			}
		case "notify_up", "notify_down":
			c.hookNote(ch, "on_health")
		case "inhibit_on_failure":
			c.mapped(ch, "lvsd always keeps a failed backend at weight 0 instead of deleting it")
		case "HTTP_GET", "SSL_GET", "TCP_CHECK", "MISC_CHECK", "DNS_CHECK", "UDP_CHECK", "PING_CHECK", "SMTP_CHECK":
			checks = append(checks, c.checker(ch, b, t)...)
		}
	}
	if b.upper == 0 {
		b.lower = 0
	}
	if len(checks) > 0 {
		b.health = healthOf(checks)
	}
	return b
}

// check is one lvsd check being built.
type check struct {
	typ      string
	port     int
	path     string
	host     string
	expect   string
	command  []string
	query    string
	send     string
	receive  string
	interval time.Duration
	timeout  time.Duration
	fall     int
}

// flow writes the check in YAML flow form.
func (k check) flow(h *health) string {
	f := []string{"type: " + k.typ}
	if k.port != 0 {
		f = append(f, "port: "+strconv.Itoa(k.port))
	}
	if k.path != "" {
		f = append(f, "path: "+importer.Text(k.path))
	}
	if k.host != "" {
		f = append(f, "host: "+importer.Text(k.host))
	}
	if k.expect != "" {
		f = append(f, "expect: "+strconv.Quote(k.expect))
	}
	if k.query != "" {
		f = append(f, "query: "+importer.Text(k.query))
	}
	if k.send != "" {
		f = append(f, "send: "+strconv.Quote(k.send))
	}
	if k.receive != "" {
		f = append(f, "receive: "+strconv.Quote(k.receive))
	}
	if len(k.command) > 0 {
		f = append(f, "command: "+importer.Texts(k.command))
	}
	if k.interval != h.interval {
		f = append(f, "interval: "+importer.Duration(k.interval))
	}
	if k.timeout != h.timeout {
		f = append(f, "timeout: "+importer.Duration(k.timeout))
	}
	return "{" + strings.Join(f, ", ") + "}"
}

// health is one lvsd health block.
type health struct {
	interval, timeout time.Duration
	fall              int
	checks            []check
}

func (h *health) key() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s %d", h.interval, h.timeout, h.fall)
	for _, k := range h.checks {
		b.WriteString(" " + k.flow(h))
	}
	return b.String()
}

func (h *health) render(w *importer.Writer, indent int) {
	w.Key(indent, "health", "", "")
	w.Key(indent+2, "interval", importer.Duration(h.interval), "keepalived's delay_loop")
	w.Key(indent+2, "timeout", importer.Duration(h.timeout), "keepalived's connect_timeout")
	w.Key(indent+2, "rise", "1", "keepalived: one passing check brings a server back; lvsd's default is 2")
	w.Key(indent+2, "fall", strconv.Itoa(h.fall), "keepalived's retry + 1; lvsd's default is 3")
	w.Key(indent+2, "checks", "", "")
	for _, k := range h.checks {
		w.Item(indent+4, k.flow(h), "")
	}
}

// healthOf makes the health block of a backend's checks: the first
// check's timers are the block's (the others keep their own), and its fall
// the most patient of the checks' (lvsd has one fall per block).
func healthOf(checks []check) *health {
	h := &health{interval: checks[0].interval, timeout: checks[0].timeout, fall: checks[0].fall, checks: checks}
	for _, k := range checks[1:] {
		h.fall = max(h.fall, k.fall)
	}
	return h
}

// checker reads one checker block into lvsd checks (HTTP_GET with several
// urls: one check each, all of which must pass, as in keepalived).
func (c *converter) checker(n *Node, b *backend, inherited timers) []check {
	t := inherited
	for _, ch := range n.Children {
		switch ch.Keyword {
		case "delay_loop", "connect_timeout", "retry", "nb_get_retry", "delay_before_retry", "virtualhost", "alpha", "warmup":
			c.timer(ch, &t)
		}
	}
	base := check{port: b.port, interval: max(t.delayLoop, 100*time.Millisecond), timeout: t.connTimeout, fall: t.retry + 1}
	if base.timeout > base.interval {
		base.timeout = base.interval
		c.res.Note(n.File, n.Line, n.Keyword, importer.Approximated, "its connect_timeout exceeds delay_loop; lvsd's timeout is at most the interval: %s", importer.Duration(base.interval))
	}
	for _, ch := range n.Children {
		switch ch.Keyword {
		case "connect_port":
			if p, ok := argInt(ch, 0, 1, 65535); ok {
				base.port = p
				c.mapped(ch, "port: %d", p)
			} else {
				c.notMapped(ch, "%q is not a port", strings.Join(ch.Args, " "))
			}
		case "misc_timeout":
			if d, ok := seconds(strings.Join(ch.Args, "")); ok && d > 0 {
				base.timeout = min(d, base.interval)
				c.mapped(ch, "timeout: %s (at most the interval)", importer.Duration(base.timeout))
			} else {
				c.notMapped(ch, "%q is not a time in seconds", strings.Join(ch.Args, " "))
			}
		}
	}
	switch n.Keyword {
	case "TCP_CHECK":
		base.typ = "tcp"
		c.mapped(n, "check type tcp")
		return []check{base}
	case "PING_CHECK":
		base.typ, base.port = "icmp", 0
		c.mapped(n, "check type icmp")
		return []check{base}
	case "SMTP_CHECK":
		base.typ = "tcp"
		if base.port == 0 || base.port == b.port {
			base.port = 25
		}
		for _, ch := range n.Children {
			switch ch.Keyword {
			case "helo_name":
				c.notMapped(ch, "lvsd has no SMTP check: the tcp check sends no HELO")
			case "host":
				c.notMapped(ch, "lvsd probes the backend's own address")
				c.skipped(ch.Children)
			}
		}
		c.approx(n, "lvsd has no SMTP check: a tcp check of port %d (the connection, not the server's greeting)", base.port)
		return []check{base}
	case "MISC_CHECK":
		return c.miscCheck(n, base)
	case "DNS_CHECK":
		return c.dnsCheck(n, base)
	case "UDP_CHECK":
		return c.udpCheck(n, base)
	}
	return c.httpCheck(n, base, t)
}

func (c *converter) httpCheck(n *Node, base check, t timers) []check {
	base.typ = "http"
	if n.Keyword == "SSL_GET" {
		base.typ = "https"
	}
	base.host = t.virtualhost
	c.mapped(n, "check type %s (certificates not verified, as keepalived)", base.typ)
	var out []check
	for _, ch := range n.Children {
		switch ch.Keyword {
		case "url":
			k := base
			k.path = "/"
			k.expect = "200-299"
			c.mapped(ch, "one %s check", base.typ)
			for _, u := range ch.Children {
				switch u.Keyword {
				case "path":
					if len(u.Args) == 1 && strings.HasPrefix(u.Args[0], "/") {
						k.path = u.Args[0]
						c.mapped(u, "path: %s", k.path)
					} else {
						c.notMapped(u, "%q is not a path starting with /", strings.Join(u.Args, " "))
					}
				case "status_code":
					c.statusCode(u, &k)
				case "virtualhost":
					if len(u.Args) == 1 {
						k.host = u.Args[0]
						c.mapped(u, "host: %s", k.host)
					}
				case "digest":
					c.notMapped(u, "%s", notMappedWhy["digest"])
				}
			}
			out = append(out, k)
		case "enable_sni":
			c.mapped(ch, "lvsd sends the check's host as SNI")
		}
	}
	if len(out) == 0 {
		k := base
		k.path, k.expect = "/", "200-299"
		out = append(out, k)
	}
	return out
}
