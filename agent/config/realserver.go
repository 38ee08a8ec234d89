package config

import (
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/lvsd/lvsd/agent/config/yamldoc"
)

// RealServer is the validated `realserver:` block of the agent file: what a
// DR real server holds and how it reports its weight.
type RealServer struct {
	// VIPs go on lo (IPv4 /32, IPv6 /128), in the file's order.
	VIPs []netip.Addr
	// ARPInterfaces get arp_ignore/arp_announce (and a loose rp_filter)
	// besides "all". Empty: only "all", which the kernel combines with every
	// interface's own value (the maximum wins), so ARP is suppressed
	// everywhere anyway.
	ARPInterfaces []string
	// Weight is announced in X-Load-Balancing-Endpoint-Weight (0 when drained).
	Weight int
	Health RealServerHealth
	// Tunnel is the decapsulation of tunnel VIPs (realserver_tunnel.go);
	// zero without any.
	Tunnel RealServerTunnel
	// TOA is the client_address block (clientaddress.go); zero without it.
	TOA RealServerTOA
}

// RealServerHealth is the weight endpoint the directors probe.
type RealServerHealth struct {
	// Listen is the TCP address of the endpoint; "" means it is off.
	Listen string
	// Path answers with the weight header; other paths are 404.
	Path string
	// Checks must all pass for a 200; any failure answers 503.
	Checks []LocalCheck
}

// LocalCheck is one check of the real server's own service, run on every
// request to the endpoint.
type LocalCheck struct {
	Type    string // only "tcp": a connection to Address succeeds
	Address string // host:port, host an IP address
	Timeout time.Duration
}

// String names the check in answers and logs: "tcp 127.0.0.1:80".
func (c LocalCheck) String() string { return c.Type + " " + c.Address }

// Defaults and bounds of the realserver block.
const (
	// MaxEndpointWeight is the top of X-Load-Balancing-Endpoint-Weight's
	// range (seed 000: 0 to 1000).
	MaxEndpointWeight       = 1000
	DefaultRealServerWeight = 1
	// DefaultHealthListen is lvsd's own port (metrics are on 9610), not a
	// common application port a real server's own service may want.
	DefaultHealthListen      = ":9611"
	DefaultHealthPath        = "/healthz"
	DefaultLocalCheckTimeout = time.Second
	maxLocalCheckTimeout     = 10 * time.Second
)

type rawRealServer struct {
	VIPs          []string             `yaml:"vips"`
	ARPInterfaces []string             `yaml:"arp_interfaces"`
	Weight        *int                 `yaml:"weight" range:"0-1000"` // MaxEndpointWeight
	Tunnel        *rawRealServerTunnel `yaml:"tunnel"`
	ClientAddress *rawRealServerTOA    `yaml:"client_address"`
	Health        *struct {
		Listen *string `yaml:"listen"`
		Path   *string `yaml:"path"`
		Checks []struct {
			Type    string       `yaml:"type"`
			Address string       `yaml:"address"`
			Timeout yamldoc.Text `yaml:"timeout"`
		} `yaml:"checks"`
	} `yaml:"health"`
}

// realServer validates the realserver block. It applies defaults for role
// realserver even when the block is absent; for role director the block
// is an error. iface is the agent file's interface key.
func (d *doc) realServer(role Role, raw *rawRealServer, iface string) RealServer {
	if role != RoleRealServer {
		if raw != nil {
			d.Errorf("$.realserver", "realserver is only for role realserver (role is %s)", role)
		}
		return RealServer{}
	}
	if iface != "" {
		d.Errorf("$.interface", "interface is for role director; a real server names its interfaces in realserver.arp_interfaces")
	}
	rs := RealServer{
		Weight: DefaultRealServerWeight,
		Health: RealServerHealth{Listen: DefaultHealthListen, Path: DefaultHealthPath},
	}
	if raw == nil {
		return rs
	}
	rs.VIPs = d.realServerVIPs("$.realserver.vips", raw.VIPs, nil)
	rs.Tunnel = d.realServerTunnel(raw.Tunnel, rs.VIPs)
	rs.ARPInterfaces = d.arpInterfaces(raw.ARPInterfaces)
	rs.TOA = d.realServerTOA(raw.ClientAddress)
	if raw.Weight != nil {
		rs.Weight = *raw.Weight // 0-MaxEndpointWeight: its range tag
	}
	if h := raw.Health; h != nil {
		if h.Listen != nil {
			rs.Health.Listen = d.healthListen(*h.Listen)
		}
		if h.Path != nil {
			rs.Health.Path = *h.Path
			if !strings.HasPrefix(rs.Health.Path, "/") || strings.ContainsAny(rs.Health.Path, " ?#") {
				d.Errorf("$.realserver.health.path", "health path %q is not an URL path like /healthz", rs.Health.Path)
			}
		}
		for i, c := range h.Checks {
			path := fmt.Sprintf("$.realserver.health.checks[%d]", i)
			lc := LocalCheck{Type: orDefault(c.Type, "tcp"), Address: c.Address, Timeout: DefaultLocalCheckTimeout}
			if lc.Type != "tcp" {
				d.Errorf(path+".type", "check type %q is not tcp (the only local check)", c.Type)
			}
			if !isIPPort(c.Address) {
				d.Errorf(path+".address", "check address %q is not an IP address and port like 127.0.0.1:80 or [::1]:80", c.Address)
			}
			if c.Timeout != "" {
				v, err := time.ParseDuration(string(c.Timeout))
				if err != nil || v <= 0 || v > maxLocalCheckTimeout {
					d.Errorf(path+".timeout", "check timeout %q is not a duration from 1ms to %s", c.Timeout, maxLocalCheckTimeout)
				} else {
					lc.Timeout = v
				}
			}
			rs.Health.Checks = append(rs.Health.Checks, lc)
		}
	}
	return rs
}

// realServerVIPs validates a list of VIPs at path; none may be in other,
// a list validated before.
func (d *doc) realServerVIPs(at string, raw []string, other []netip.Addr) []netip.Addr {
	var out []netip.Addr
	for i, r := range raw {
		path := fmt.Sprintf("%s[%d]", at, i)
		a, err := netip.ParseAddr(r)
		if err != nil || a.Zone() != "" {
			d.Errorf(path, "vip %q is not an IP address", r)
			continue
		}
		a = a.Unmap()
		if !a.IsGlobalUnicast() {
			// Loopback, link-local, multicast and unspecified addresses
			// cannot be a service address clients reach through a director.
			d.Errorf(path, "vip %s is not a unicast address clients can reach (loopback, link-local, multicast and 0.0.0.0/:: are not)", a)
			continue
		}
		if slices.Contains(out, a) {
			d.Errorf(path, "vip %s is listed twice", a)
			continue
		}
		if slices.Contains(other, a) {
			d.Errorf(path, "vip %s is also in realserver.vips; a tunnel VIP is held on lo all the same, list it once", a)
			continue
		}
		out = append(out, a)
	}
	return out
}

func (d *doc) arpInterfaces(raw []string) []string {
	var out []string
	for i, name := range raw {
		path := fmt.Sprintf("$.realserver.arp_interfaces[%d]", i)
		switch {
		case name == "all":
			continue // always set; naming it is allowed and changes nothing
		case name == "lo":
			d.Errorf(path, "lo holds the VIPs; arp_interfaces are the interfaces facing the network (e.g. eth0)")
		case name == "default":
			d.Errorf(path, "\"default\" only seeds interfaces created later; lvsd always sets \"all\", which covers them")
		case !isInterfaceName(name):
			d.Errorf(path, "%q is not an interface name (1-15 characters, no spaces or slashes)", name)
		case slices.Contains(out, name):
			d.Errorf(path, "interface %s is listed twice", name)
		default:
			out = append(out, name)
		}
	}
	return out
}

// healthListen accepts "off", ":port" or "IP:port".
func (d *doc) healthListen(s string) string {
	if s == "off" {
		return ""
	}
	host, port, err := net.SplitHostPort(s)
	n, perr := strconv.Atoi(port)
	_, herr := netip.ParseAddr(host)
	if err != nil || perr != nil || n < 1 || n > 65535 || host != "" && herr != nil {
		d.Errorf("$.realserver.health.listen", "health listen %q is not \":port\", \"IP:port\" or \"off\"", s)
		return DefaultHealthListen
	}
	return s
}

// isInterfaceName mirrors the kernel's dev_valid_name.
func isInterfaceName(s string) bool {
	return s != "" && len(s) < 16 && s != "." && s != ".." && !strings.ContainsAny(s, "/: \t\n")
}

func isIPPort(s string) bool {
	ap, err := netip.ParseAddrPort(s)
	return err == nil && ap.Port() != 0
}
