package config

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Health is how a service's backends are checked (docs/health.md).
type Health struct {
	Checks       []Check
	AtLeast      int // a round passes with at least this many passing checks; 0 = all
	Rise, Fall   int
	WeightHeader bool // use X-Load-Balancing-Endpoint-Weight from http(s) checks
}

// Check is one validated probe.
type Check struct {
	Type              string // tcp | http | https | udp | icmp | dns | exec
	Port              uint16 // 0: the backend's port
	Interval, Timeout time.Duration
	Method, Path      string
	Host              string
	Expect            [2]int // HTTP status range
	Body              string // HTTP body substring
	Send, Receive     string // UDP payload and expected reply substring
	Query             string // DNS name
	Command           []string
}

// Failover is the service's failover policy (seed 000).
type Failover struct {
	Configured        bool // a failover block or a failover backend exists
	Ratio             float64
	DropIfNoneHealthy bool
	// DrainOnFailover false drops every connection of the service when its
	// eligible backends switch pool (failover or failback); true (the
	// default) lets them go on.
	DrainOnFailover bool
}

// Defaults of health checking.
const (
	DefaultInterval = 2 * time.Second
	DefaultTimeout  = time.Second
	DefaultRise     = 2
	DefaultFall     = 3
)

// CheckTypes lists the probe types.
var CheckTypes = []string{"tcp", "http", "https", "udp", "icmp", "dns", "exec"}

type rawHealth struct {
	Checks       []rawCheck `yaml:"checks"`
	AtLeast      int        `yaml:"at_least"`
	Interval     string     `yaml:"interval"`
	Timeout      string     `yaml:"timeout"`
	Rise         *int       `yaml:"rise"`
	Fall         *int       `yaml:"fall"`
	WeightHeader bool       `yaml:"weight_header"`
}

type rawCheck struct {
	Type     string   `yaml:"type"`
	Port     int      `yaml:"port"`
	Interval string   `yaml:"interval"`
	Timeout  string   `yaml:"timeout"`
	Method   string   `yaml:"method"`
	Path     string   `yaml:"path"`
	Host     string   `yaml:"host"`
	Expect   string   `yaml:"expect"`
	Body     string   `yaml:"body"`
	Send     string   `yaml:"send"`
	Receive  string   `yaml:"receive"`
	Query    string   `yaml:"query"`
	Command  []string `yaml:"command"`
}

type rawFailover struct {
	Ratio             float64 `yaml:"ratio"`
	DropIfNoneHealthy bool    `yaml:"drop_if_none_healthy"`
	DrainOnFailover   *bool   `yaml:"drain_on_failover"`
}

// health validates a health block found at path ("$.health" or a backend's).
func (d *doc) health(path, name string, raw *rawHealth, inherit *Health) *Health {
	if raw == nil {
		return inherit
	}
	h := &Health{AtLeast: raw.AtLeast, Rise: DefaultRise, Fall: DefaultFall, WeightHeader: raw.WeightHeader}
	if inherit != nil {
		h.Rise, h.Fall = inherit.Rise, inherit.Fall
	}
	if raw.Rise != nil {
		h.Rise = *raw.Rise
	}
	if raw.Fall != nil {
		h.Fall = *raw.Fall
	}
	for key, v := range map[string]int{"rise": h.Rise, "fall": h.Fall} {
		if v < 1 || v > 100 {
			d.errorf(path+"."+key, "service %q: %s %d is not in 1-100", name, key, v)
		}
	}
	interval := d.duration(path+".interval", name, "interval", raw.Interval, DefaultInterval)
	timeout := d.duration(path+".timeout", name, "timeout", raw.Timeout, DefaultTimeout)
	if len(raw.Checks) == 0 {
		d.errorf(path, "service %q: health needs at least one check (e.g. checks: [{type: tcp}])", name)
	}
	httpChecks := 0
	for i, rc := range raw.Checks {
		c := d.check(fmt.Sprintf("%s.checks[%d]", path, i), name, rc, interval, timeout)
		if c.Type == "http" || c.Type == "https" {
			httpChecks++
		}
		h.Checks = append(h.Checks, c)
	}
	if h.AtLeast < 0 || h.AtLeast > len(h.Checks) {
		d.errorf(path+".at_least", "service %q: at_least %d is not in 0-%d (0 means all checks)", name, h.AtLeast, len(h.Checks))
	}
	if raw.WeightHeader && httpChecks == 0 && len(raw.Checks) > 0 {
		d.errorf(path+".weight_header", "service %q: weight_header needs an http or https check (the weight comes in its response)", name)
	}
	// A backend's own checks keep reading the weight header if the
	// service's do and they can (they have an http check).
	if inherit != nil && inherit.WeightHeader && httpChecks > 0 {
		h.WeightHeader = true
	}
	return h
}

func (d *doc) check(path, name string, rc rawCheck, interval, timeout time.Duration) Check {
	c := Check{Type: rc.Type, Method: orDefault(rc.Method, "GET"), Path: orDefault(rc.Path, "/"), Host: rc.Host,
		Expect: [2]int{200, 399}, Body: rc.Body, Send: rc.Send, Receive: rc.Receive, Query: rc.Query, Command: rc.Command}
	if !oneOf(c.Type, CheckTypes...) {
		d.errorf(path+".type", "service %q: check type %q is not one of %s", name, rc.Type, strings.Join(CheckTypes, ", "))
	}
	if rc.Port < 0 || rc.Port > 65535 {
		d.errorf(path+".port", "service %q: check port %d is not in 1-65535", name, rc.Port)
	} else {
		c.Port = uint16(rc.Port)
	}
	c.Interval = d.duration(path+".interval", name, "interval", rc.Interval, interval)
	c.Timeout = d.duration(path+".timeout", name, "timeout", rc.Timeout, timeout)
	switch {
	case c.Interval < 100*time.Millisecond:
		d.errorf(path+".interval", "service %q: check interval %s is below 100ms", name, c.Interval)
	case c.Timeout <= 0 || c.Timeout > c.Interval:
		d.errorf(path+".timeout", "service %q: check timeout %s must be above 0 and at most the interval %s", name, c.Timeout, c.Interval)
	}
	if rc.Expect != "" {
		lo, hi, isRange := strings.Cut(rc.Expect, "-")
		a, err1 := strconv.Atoi(strings.TrimSpace(lo))
		b, err2 := a, error(nil)
		if isRange {
			b, err2 = strconv.Atoi(strings.TrimSpace(hi))
		}
		if err1 != nil || err2 != nil || a < 100 || b > 599 || b < a {
			d.errorf(path+".expect", "service %q: expect %q is not an HTTP status or range like 200-299", name, rc.Expect)
		}
		c.Expect = [2]int{a, b}
	}
	if !strings.HasPrefix(c.Path, "/") {
		d.errorf(path+".path", "service %q: check path %q must start with /", name, c.Path)
	}
	switch c.Type {
	case "exec":
		if len(c.Command) == 0 {
			d.errorf(path, "service %q: an exec check needs command: [program, args...]", name)
		}
	case "dns":
		if c.Query == "" {
			d.errorf(path, "service %q: a dns check needs query: a name to resolve", name)
		}
	}
	return c
}

func (d *doc) failover(name string, raw *rawFailover, anyFailoverBackend bool) Failover {
	f := Failover{Configured: raw != nil || anyFailoverBackend, DrainOnFailover: true}
	if raw == nil {
		return f
	}
	if raw.DrainOnFailover != nil {
		f.DrainOnFailover = *raw.DrainOnFailover
	}
	if raw.Ratio < 0 || raw.Ratio > 1 {
		d.errorf("$.failover.ratio", "service %q: failover ratio %g is not in 0.0-1.0", name, raw.Ratio)
	}
	f.Ratio, f.DropIfNoneHealthy = raw.Ratio, raw.DropIfNoneHealthy
	return f
}

// checkPorts rejects checks that need a port and have none: the backend's
// port, else the service's first port, is the default, and a service on all
// ports has none.
func (d *doc) checkPorts(s Service) {
	for i, b := range s.Backends {
		if b.Health == nil || b.Port != 0 || len(s.Ports) > 0 {
			continue
		}
		for _, c := range b.Health.Checks {
			if c.Port == 0 && c.Type != "icmp" && c.Type != "exec" {
				d.errorf(fmt.Sprintf("$.backends[%d]", i), "service %q: a %s check of backend %s needs a port: the service takes all ports", s.Name, c.Type, b.Addr)
				return
			}
		}
	}
}
