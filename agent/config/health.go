package config

import (
	"fmt"
	"strings"
	"time"

	"github.com/lvsd/lvsd/agent/config/yamldoc"
)

// Health is how a service's backends are checked (docs/health.md).
type Health struct {
	Checks       []Check
	AtLeast      int // a round passes with at least this many passing checks; 0 = all
	Rise, Fall   int
	WeightHeader bool // use X-Load-Balancing-Endpoint-Weight from http(s) checks
	// StartDown (initial: down) counts a backend unhealthy until its checks
	// pass rise rounds in a row, as keepalived's alpha does; by default a
	// backend starts healthy and its first round decides at once.
	StartDown bool
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
	TLS               TLS   // https
	User              *User // exec: the account it runs as; nil: lvsd's own
	// LaxModes: exec, strict_modes is off: the program is run whoever may
	// write it.
	LaxModes bool
}

// TLS is how an https check treats the backend's certificate.
type TLS struct {
	// Verify checks the certificate chain and name. Off by default: a
	// health check proves liveness, and backends rarely hold a certificate
	// for their own address. On by default once CAFile or ServerName is
	// given.
	Verify bool
	// CAFile holds the PEM roots trusted instead of the system's; RootCAs
	// is its content, read when the configuration is loaded.
	CAFile  string
	RootCAs []byte
	// ServerName is the name verified and sent as SNI; "": the check's
	// host, else the backend's address.
	ServerName string
}

// User is the account an exec check runs as, looked up when the
// configuration is loaded.
type User struct {
	Name     string
	UID, GID uint32
	Groups   []uint32 // supplementary groups
	Home     string
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
	Checks       []rawCheck   `yaml:"checks"`
	AtLeast      int          `yaml:"at_least" range:"0-100"`
	Interval     yamldoc.Text `yaml:"interval"`
	Timeout      yamldoc.Text `yaml:"timeout"`
	Rise         *int         `yaml:"rise" range:"1-100"`
	Fall         *int         `yaml:"fall" range:"1-100"`
	WeightHeader bool         `yaml:"weight_header"`
	Initial      string       `yaml:"initial"`
}

type rawCheck struct {
	Type     string       `yaml:"type"`
	Port     *int         `yaml:"port" range:"1-65535"`
	Interval yamldoc.Text `yaml:"interval"`
	Timeout  yamldoc.Text `yaml:"timeout"`
	Method   string       `yaml:"method"`
	Path     string       `yaml:"path"`
	Host     string       `yaml:"host"`
	Expect   yamldoc.Text `yaml:"expect"`
	Body     string       `yaml:"body"`
	Send     string       `yaml:"send"`
	Receive  string       `yaml:"receive"`
	Query    string       `yaml:"query"`
	Command  []string     `yaml:"command"`
	User     string       `yaml:"user"`
	TLS      *rawTLS      `yaml:"tls"`
}

type rawTLS struct {
	Verify     *bool  `yaml:"verify"`
	CAFile     string `yaml:"ca_file"`
	ServerName string `yaml:"server_name"`
}

type rawFailover struct {
	Ratio             float64 `yaml:"ratio"`
	DropIfNoneHealthy *bool   `yaml:"drop_if_none_healthy"`
	DrainOnFailover   *bool   `yaml:"drain_on_failover"`
}

// health validates a health block found at path ("$.health" or a backend's).
func (d *doc) health(path, subject string, raw *rawHealth, inherit *Health) *Health {
	if raw == nil {
		return inherit
	}
	h := &Health{AtLeast: raw.AtLeast, Rise: DefaultRise, Fall: DefaultFall, WeightHeader: raw.WeightHeader}
	if inherit != nil {
		h.Rise, h.Fall, h.StartDown = inherit.Rise, inherit.Fall, inherit.StartDown
	}
	switch raw.Initial {
	case "":
	case "up":
		h.StartDown = false
	case "down":
		h.StartDown = true
	default:
		d.Errorf(path+".initial", "%s: health initial %q is not up or down", subject, raw.Initial)
	}
	if raw.Rise != nil {
		h.Rise = *raw.Rise
	}
	if raw.Fall != nil {
		h.Fall = *raw.Fall
	}
	interval := d.duration(path+".interval", subject, "interval", string(raw.Interval), DefaultInterval)
	timeout := d.duration(path+".timeout", subject, "timeout", string(raw.Timeout), DefaultTimeout)
	if len(raw.Checks) == 0 {
		d.Errorf(path, "%s: health needs at least one check (e.g. checks: [{type: tcp}])", subject)
	}
	httpChecks := 0
	for i, rc := range raw.Checks {
		c := d.check(fmt.Sprintf("%s.checks[%d]", path, i), subject, rc, interval, timeout)
		if c.Type == "http" || c.Type == "https" {
			httpChecks++
		}
		h.Checks = append(h.Checks, c)
	}
	if h.AtLeast < 0 || h.AtLeast > len(h.Checks) {
		d.Errorf(path+".at_least", "%s: at_least %d is not in 0-%d (0 means all checks)", subject, h.AtLeast, len(h.Checks))
	}
	if raw.WeightHeader && httpChecks == 0 && len(raw.Checks) > 0 {
		d.Errorf(path+".weight_header", "%s: weight_header needs an http or https check (the weight comes in its response)", subject)
	}
	// A backend's own checks keep reading the weight header if the
	// service's do and they can (they have an http check).
	if inherit != nil && inherit.WeightHeader && httpChecks > 0 {
		h.WeightHeader = true
	}
	return h
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
		d.Errorf("$.failover.ratio", "service %q: failover ratio %g is not in 0.0-1.0", name, raw.Ratio)
	}
	f.Ratio, f.DropIfNoneHealthy = raw.Ratio, raw.DropIfNoneHealthy != nil && *raw.DropIfNoneHealthy
	return f
}

// whenNoneHealthy applies when_none_healthy: all (the default: with no
// healthy backend new connections go to every backend) or drop (they are
// refused). It says the same as failover.drop_if_none_healthy without
// turning a failover policy on; the two must not disagree.
func (d *doc) whenNoneHealthy(f *Failover, name, value string, raw *rawFailover) {
	switch value {
	case "":
		return
	case "all", "drop":
	default:
		d.Errorf("$.when_none_healthy", "service %q: when_none_healthy %q is not all or drop", name, value)
		return
	}
	drop := value == "drop"
	if raw != nil && raw.DropIfNoneHealthy != nil && *raw.DropIfNoneHealthy != drop {
		d.Errorf("$.when_none_healthy", "service %q: when_none_healthy %s contradicts failover.drop_if_none_healthy %t (say it once)", name, value, *raw.DropIfNoneHealthy)
		return
	}
	f.DropIfNoneHealthy = drop
}

// checkPorts rejects checks that need a port and have none. A check's
// port defaults to the backend's, else to the service's port when it has
// exactly one; a service on all ports, a range or several ports leaves the
// choice to the operator (icmp and exec checks need none).
func (d *doc) checkPorts(s Service) {
	single := len(s.Ports) == 1 && s.Ports[0].From == s.Ports[0].To
	for i, b := range s.Backends {
		if b.Health == nil || b.Port != 0 || single {
			continue
		}
		for _, c := range b.Health.Checks {
			if c.Port == 0 && c.Type != "icmp" && c.Type != "exec" {
				d.Errorf(fmt.Sprintf("$.backends[%d]", i), "service %q: a %s check of backend %s needs a port: the service has no single port (%s)", s.Name, c.Type, b.Addr, portsWord(s))
				return
			}
		}
	}
}

func portsWord(s Service) string {
	if s.AllPorts {
		return "it takes all ports"
	}
	var ps []string
	for _, p := range s.Ports {
		ps = append(ps, p.String())
	}
	return "it takes " + strings.Join(ps, ", ")
}
