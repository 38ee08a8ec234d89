package config

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/lvsd/lvsd/agent/config/yamldoc"
	"github.com/lvsd/lvsd/agent/policy"
	"github.com/lvsd/lvsd/ipvs/l4"
)

// Forwarding is how the director delivers packets to real servers.
type Forwarding string

// Forwarding modes.
const (
	DR      Forwarding = "dr"
	NAT     Forwarding = "nat"
	FullNAT Forwarding = "fullnat"
	// Tunnel encapsulates the client's packet to the real server, which
	// unwraps it and answers the client directly (tunnel.go).
	Tunnel Forwarding = "tunnel"
)

// Affinity selects which parts of the client's packets pick a backend (seed 000).
type Affinity string

// Affinities.
const (
	AffinityNone              Affinity = "none"
	AffinityClientIP          Affinity = "client-ip"
	AffinityClientIPProto     Affinity = "client-ip-proto"
	AffinityClientIPPortProto Affinity = "client-ip-port-proto"
)

// Schedulers lists the IPVS schedulers lvsd accepts.
var Schedulers = []string{"mh", "rr", "wrr", "lc", "wlc", "lblc", "lblcr", "dh", "sh", "sed", "nq", "fo", "ovf", "twos"}

// Service is one validated service.
type Service struct {
	Name       string
	File       string
	Line       int
	VIP        netip.Addr
	Protocol   string         // tcp | udp | sctp | any
	Ports      []l4.PortRange // sorted, non-overlapping
	AllPorts   bool
	Forwarding Forwarding
	Scheduler  string
	Affinity   Affinity
	Backends   []Backend // sorted by address and port

	// SourceRanges steer: the service takes only clients in these prefixes
	// (longest prefix wins over other services on the same VIP and ports).
	SourceRanges []netip.Prefix
	// SNATAddresses are the FULLNAT source addresses (consecutive).
	SNATAddresses []netip.Addr
	// SNATByDirector are the FULLNAT source addresses of each director by
	// node name (each consecutive), for cluster mode ecmp: every director
	// sources its connections from its own, so that the real servers'
	// replies come back to it (docs/ecmp.md, "FULLNAT").
	SNATByDirector map[string][]netip.Addr
	// Gateway is the NAT real servers' default gateway on the director
	// (nat.gateway); invalid: none managed by lvsd. It moves with the VIP.
	Gateway netip.Addr
	// Interface is where the director holding the VIP puts it and its
	// FULLNAT source addresses, and announces them; "": the agent file's
	// interface.
	Interface string
	// GatewayInterface is where Gateway goes (nat.gateway_interface): the
	// real servers' side of a two-armed director; "": Interface.
	GatewayInterface string
	// Tunnel is the encapsulation of forwarding tunnel; zero otherwise.
	Tunnel TunnelOptions
	// Persistence, when Timeout > 0, sends a client (of Netmask granularity)
	// to the same backend for Timeout after its last connection.
	Persistence Persistence
	// PersistenceOnUnhealthy says whether a backend's connections go on
	// once it is unhealthy and ineligible (seed 000); see Persists.
	PersistenceOnUnhealthy policy.Persistence
	DrainTimeout           time.Duration
	Health                 *Health // nil: backends are not checked (always healthy)
	Failover               Failover
	// SorryServer takes new connections while no backend is eligible
	// (docs/health.md); invalid: none, new connections are dropped then.
	// Port 0: the client's destination port.
	SorryServer netip.AddrPort
	// Announce, with a bgp block, replaces its default path attributes for
	// this service's VIP (every service on a VIP must agree); nil: the
	// defaults.
	Announce *Announce
	// ClientAddress is what a FULLNAT real server sees as the peer
	// (clientaddress.go): the zero value, the director's source address,
	// keeps the digest of a release without the key.
	ClientAddress ClientAddress
}

// Persistence is IPVS persistence (seed 000's per-session tracking).
type Persistence struct {
	Timeout time.Duration
	Netmask int // prefix length; 0 = the whole address
}

// DefaultDrainTimeout bounds how long a removed backend keeps its connections.
const DefaultDrainTimeout = 30 * time.Second

// Backend is one real server of a service.
type Backend struct {
	// Addr and Port name the backend in its service (BackendKey): the name
	// is made where it is needed, not kept here, where at 10,000 services
	// × 10 backends it held 1.7 MB of strings and made a service's
	// backends 704 bytes instead of 512.
	Addr   netip.Addr
	Health *Health // the service's, or the backend's own override; nil: not checked
	// UpperThreshold and LowerThreshold are IPVS's connection limits (0:
	// none; spec.Destination of ipvs/spec says what the kernel counts).
	UpperThreshold, LowerThreshold uint32
	// Weight is 0-MaxWeight: an int32, and the fields in this order, make
	// a Backend 48 bytes, not 56 (100,000 of them at 10,000 services).
	Weight   int32
	Port     uint16 // 0: the port the client connected to
	Failover bool   // in the failover pool (seed 000)
}

// BackendKey names backend addr (port 0: the client's port) or addr:port
// of service: "web/10.0.0.1", "web/10.0.0.1:8080".
func BackendKey(service string, addr netip.Addr, port uint16) string {
	var buf [80]byte
	return string(AppendBackendKey(buf[:0], service, addr, port))
}

// AppendBackendKey appends BackendKey(service, addr, port) to dst: a map
// indexed by string(AppendBackendKey(buf[:0], ...)), or a comparison
// with it, allocates nothing.
func AppendBackendKey(dst []byte, service string, addr netip.Addr, port uint16) []byte {
	dst = append(append(dst, service...), '/')
	if port == 0 {
		return addr.AppendTo(dst)
	}
	return netip.AddrPortFrom(addr, port).AppendTo(dst)
}

// Weight bounds of a backend (IPVS accepts any non-negative int; Maglev
// precision makes larger values pointless).
const (
	MaxWeight     = 65535
	DefaultWeight = 1
)

type rawService struct {
	Service    string         `yaml:"service"`
	VIP        string         `yaml:"vip"`
	Protocol   string         `yaml:"protocol"`
	Ports      []yamldoc.Text `yaml:"ports"`
	Forwarding string         `yaml:"forwarding"`
	Scheduler  string         `yaml:"scheduler"`
	Affinity   string         `yaml:"affinity"`
	Backends   []rawBackend   `yaml:"backends"`
	// SorryServer is ADDRESS or ADDRESS:PORT.
	SorryServer string `yaml:"sorry_server"`

	SourceRanges []string `yaml:"source_ranges"`
	FullNAT      struct {
		SourceAddresses []string            `yaml:"source_addresses"`
		PerDirector     map[string][]string `yaml:"per_director"`
	} `yaml:"fullnat"`
	ClientAddress string `yaml:"client_address"`
	Interface     string `yaml:"interface"`
	NAT           struct {
		Gateway          string `yaml:"gateway"`
		GatewayInterface string `yaml:"gateway_interface"`
	} `yaml:"nat"`
	Tunnel      *rawTunnel `yaml:"tunnel"`
	Persistence *struct {
		Timeout yamldoc.Text `yaml:"timeout"`
		Netmask *int         `yaml:"netmask" range:"1-128"`
	} `yaml:"persistence"`
	PersistenceOnUnhealthy string       `yaml:"persistence_on_unhealthy"`
	DrainTimeout           yamldoc.Text `yaml:"drain_timeout"`
	Health                 *rawHealth   `yaml:"health"`
	Failover               *rawFailover `yaml:"failover"`
	WhenNoneHealthy        string       `yaml:"when_none_healthy"`
	Announce               *rawAnnounce `yaml:"announce"`
}

type rawBackend struct {
	Address        string     `yaml:"address"`
	Port           *int       `yaml:"port" range:"1-65535"`
	Weight         *int       `yaml:"weight" range:"0-65535"` // MaxWeight
	Failover       bool       `yaml:"failover"`
	Health         *rawHealth `yaml:"health"`
	UpperThreshold *int       `yaml:"upper_threshold" range:"1-2147483647"`
	LowerThreshold *int       `yaml:"lower_threshold" range:"1-2147483647"`
}

func (d *doc) service(raw rawService) Service {
	line, _ := d.Position("$")
	s := Service{
		Name:       raw.Service,
		File:       d.File,
		Line:       line,
		Protocol:   orDefault(raw.Protocol, "tcp"),
		Forwarding: Forwarding(orDefault(raw.Forwarding, string(DR))),
		Scheduler:  orDefault(raw.Scheduler, "mh"),
		Affinity:   Affinity(orDefault(raw.Affinity, string(AffinityNone))),
	}
	if s.Name == "" {
		d.Errorf("$", "service: a name is required")
	} else if strings.ContainsAny(s.Name, " \t/") {
		d.Errorf("$.service", "service name %q must not contain spaces or slashes", s.Name)
	}
	vip, err := netip.ParseAddr(raw.VIP)
	switch {
	case raw.VIP == "":
		d.Errorf("$", "service %q: vip is required", s.Name)
	case err != nil:
		d.Errorf("$.vip", "service %q: vip %q is not an IP address", s.Name, raw.VIP)
	case vip.Zone() != "" || vip.IsUnspecified() || vip.IsMulticast() || vip.IsLoopback():
		d.Errorf("$.vip", "service %q: vip %s must be a unicast address", s.Name, raw.VIP)
	default:
		s.VIP = vip.Unmap()
	}
	if !oneOf(s.Protocol, "tcp", "udp", "sctp", "any") {
		d.Errorf("$.protocol", "service %q: protocol %q is not one of tcp, udp, sctp, any", s.Name, s.Protocol)
	}
	s.Ports, s.AllPorts = d.ports(s.Name, raw.Ports)
	if !oneOf(string(s.Forwarding), string(DR), string(NAT), string(FullNAT), string(Tunnel)) {
		d.Errorf("$.forwarding", "service %q: forwarding %q is not one of dr, nat, fullnat, tunnel", s.Name, s.Forwarding)
	}
	if !slices.Contains(Schedulers, s.Scheduler) {
		d.Errorf("$.scheduler", "service %q: scheduler %q is not one of %s", s.Name, s.Scheduler, strings.Join(Schedulers, ", "))
	}
	switch {
	case !oneOf(string(s.Affinity), string(AffinityNone), string(AffinityClientIP), string(AffinityClientIPProto), string(AffinityClientIPPortProto)):
		d.Errorf("$.affinity", "service %q: affinity %q is not one of none, client-ip, client-ip-proto, client-ip-port-proto", s.Name, s.Affinity)
	case s.Affinity != AffinityNone && s.Scheduler != "mh":
		// Only mh hashes what affinity names; any other scheduler would
		// ignore it.
		d.Errorf("$.affinity", "service %q: affinity %s needs scheduler mh (scheduler is %s, which ignores it); for stickiness with %s use persistence", s.Name, s.Affinity, s.Scheduler, s.Scheduler)
	}
	if s.Protocol == "any" && !s.AllPorts && len(s.Ports) > 0 {
		d.Errorf("$.ports", "service %q: protocol any takes every port: write ports: [all]", s.Name)
	}
	s.Health = d.health("$.health", serviceSubject(s.Name), raw.Health, nil)
	s.Backends = d.backends(s, raw.Backends)
	s.Failover = d.failover(s.Name, raw.Failover, slices.ContainsFunc(s.Backends, func(b Backend) bool { return b.Failover }))
	d.whenNoneHealthy(&s.Failover, s.Name, raw.WhenNoneHealthy, raw.Failover)
	s.SorryServer = d.sorryServer(s, raw.SorryServer)
	d.checkPorts(s)
	s.SourceRanges = d.sourceRanges(s, raw.SourceRanges)
	s.SNATAddresses, s.SNATByDirector = d.snatAddresses(s, raw.FullNAT.SourceAddresses, raw.FullNAT.PerDirector)
	s.Gateway = d.gateway(s, raw.NAT.Gateway)
	s.Interface = d.interfaceName("$.interface", s.Name, "interface", raw.Interface)
	s.GatewayInterface = d.interfaceName("$.nat.gateway_interface", s.Name, "nat.gateway_interface", raw.NAT.GatewayInterface)
	if s.GatewayInterface != "" && raw.NAT.Gateway == "" {
		d.Errorf("$.nat.gateway_interface", "service %q: nat.gateway_interface needs nat.gateway (the address it holds)", s.Name)
	}
	s.Tunnel = d.tunnel(s, raw.Tunnel)
	s.DrainTimeout = d.duration("$.drain_timeout", serviceSubject(s.Name), "drain_timeout", string(raw.DrainTimeout), DefaultDrainTimeout)
	if p := raw.Persistence; p != nil {
		s.Persistence.Timeout = d.duration("$.persistence.timeout", serviceSubject(s.Name), "persistence timeout", string(p.Timeout), 300*time.Second)
		if s.Persistence.Timeout < time.Second {
			d.Errorf("$.persistence.timeout", "service %q: persistence timeout must be at least 1s", s.Name)
		}
		if p.Netmask != nil {
			if *p.Netmask > s.VIP.BitLen() && s.VIP.IsValid() {
				d.Errorf("$.persistence.netmask", "service %q: persistence netmask /%d is not in 1-%d", s.Name, *p.Netmask, max(s.VIP.BitLen(), 32))
			} else if *p.Netmask != s.VIP.BitLen() {
				s.Persistence.Netmask = *p.Netmask
			}
		}
	}
	s.ClientAddress = d.clientAddress(s, raw.ClientAddress)
	if raw.Announce != nil {
		a := d.announce("$.announce", raw.Announce)
		s.Announce = &a
	}
	s.PersistenceOnUnhealthy = policy.Persistence(orDefault(raw.PersistenceOnUnhealthy, string(policy.DefaultForProtocol)))
	if err := s.PersistenceOnUnhealthy.Validate(s.Tracking()); err != nil {
		d.Errorf("$.persistence_on_unhealthy", "service %q: %v", s.Name, err)
	}
	return s
}

// Tracking is what seed 000's persistence rule reads of the service.
func (s Service) Tracking() policy.Tracking {
	return policy.Tracking{Protocol: s.Protocol, PerSession: s.Persistence.Timeout > 0, Affinity: string(s.Affinity)}
}

// KeepsConnectionsOnUnhealthy reports whether the connections of a backend
// that became unhealthy and ineligible go on (seed 000's connection
// persistence on unhealthy backends); otherwise lvsd drops them.
func (s Service) KeepsConnectionsOnUnhealthy() bool {
	return s.PersistenceOnUnhealthy.Persists(s.Tracking())
}

// serviceSubject is how messages about a service's keys begin.
func serviceSubject(name string) string { return fmt.Sprintf("service %q", name) }

func (d *doc) duration(path, subject, what, raw string, def time.Duration) time.Duration {
	if raw == "" {
		return def
	}
	v, err := time.ParseDuration(raw)
	if err != nil || v < 0 {
		d.Errorf(path, "%s: %s %q is not a duration like 30s or 5m", subject, what, raw)
		return def
	}
	return v
}

// ports accepts port numbers, "from-to" ranges and the single word "all",
// as written: decimal, without signs or leading zeros.
func (d *doc) ports(name string, raw []yamldoc.Text) ([]l4.PortRange, bool) {
	if len(raw) == 0 {
		d.Errorf("$", "service %q: ports is required (a list of ports, ranges \"8000-8099\", or [all])", name)
		return nil, false
	}
	var out []l4.PortRange
	for i, p := range raw {
		path := fmt.Sprintf("$.ports[%d]", i)
		s := string(p)
		if s == "all" {
			if len(raw) != 1 {
				d.Errorf(path, "service %q: \"all\" cannot be combined with other ports", name)
			}
			return nil, true
		}
		from, to, isRange := strings.Cut(s, "-")
		lo, ok1 := parsePort(from)
		hi, ok2 := lo, true
		if isRange {
			hi, ok2 = parsePort(to)
		}
		switch {
		case !ok1 || !ok2:
			d.Errorf(path, "service %q: port %q is not a port (1-65535), a range \"from-to\" or \"all\"", name, s)
			continue
		case hi < lo:
			d.Errorf(path, "service %q: port range %q ends before it starts", name, s)
			continue
		}
		out = append(out, l4.PortRange{From: lo, To: hi})
	}
	slices.SortFunc(out, func(a, b l4.PortRange) int { return cmp.Compare(a.From, b.From) })
	for i := 1; i < len(out); i++ {
		if out[i].From <= out[i-1].To {
			d.Errorf("$.ports", "service %q: ports %s and %s overlap", name, out[i-1], out[i])
		}
	}
	return out, false
}

// parsePort reads a port written in plain decimal: 1-65535, no sign, no
// leading zero, no spaces.
func parsePort(s string) (uint16, bool) {
	if len(s) == 0 || len(s) > 5 || s[0] == '0' || strings.Trim(s, "0123456789") != "" {
		return 0, false
	}
	n, err := strconv.Atoi(s)
	if err != nil || n > 65535 {
		return 0, false
	}
	return uint16(n), true
}

func (d *doc) backends(s Service, raw []rawBackend) []Backend {
	if len(raw) == 0 {
		d.Errorf("$", "service %q: backends is required (at least one real server)", s.Name)
		return nil
	}
	out := make([]Backend, 0, len(raw)) // exact: kept for as long as the file is
	seen := map[netip.AddrPort]bool{}
	for i, rb := range raw {
		path := fmt.Sprintf("$.backends[%d]", i)
		addr, err := netip.ParseAddr(rb.Address)
		if err != nil {
			d.Errorf(path+".address", "service %q: backend address %q is not an IP address", s.Name, rb.Address)
			continue
		}
		addr = addr.Unmap()
		b := Backend{Addr: addr, Weight: DefaultWeight, Failover: rb.Failover,
			Health: d.health(path+".health", serviceSubject(s.Name), rb.Health, s.Health)}
		if s.VIP.IsValid() && addr.Is4() != s.VIP.Is4() {
			why := ""
			if s.Forwarding == Tunnel {
				// The kernel could tunnel across families, but its
				// connection sync refuses to run with such services.
				why = " (lvsd tunnels within one family: IPVS connection sync cannot carry mixed-family services)"
			}
			d.Errorf(path+".address", "service %q: backend %s and vip %s are of different IP families%s", s.Name, addr, s.VIP, why)
		}
		if rb.Port != nil {
			b.Port = uint16(*rb.Port) // 1-65535: its range tag
		}
		if why := portRefused(s, "backend port", b.Port); why != "" {
			d.Errorf(path+".port", "service %q: %s", s.Name, why)
		}
		if rb.Weight != nil {
			b.Weight = int32(*rb.Weight) // 0-MaxWeight: its range tag
		}
		d.thresholds(path, s.Name, &b, rb)
		key := netip.AddrPortFrom(b.Addr, b.Port)
		if seen[key] {
			d.Errorf(path+".address", "service %q: backend %s is listed twice", s.Name, b)
		}
		seen[key] = true
		out = append(out, b)
	}
	slices.SortFunc(out, func(a, b Backend) int {
		return cmp.Or(a.Addr.Compare(b.Addr), cmp.Compare(a.Port, b.Port))
	})
	return out
}

// portRefused says why a backend (or the sorry server, what names it)
// cannot have port; "" when it can. DR and tunnel real servers receive the
// service port; a NAT port change needs a single service port to map.
func portRefused(s Service, what string, port uint16) yamldoc.Verbatim {
	single := len(s.Ports) == 1 && s.Ports[0].From == s.Ports[0].To
	switch {
	case port == 0:
		return ""
	case (s.Forwarding == DR || s.Forwarding == Tunnel) && !(single && s.Ports[0].From == port):
		return yamldoc.Verbatim(fmt.Sprintf("forwarding %s cannot change the port (%s %d); real servers receive the service port, so omit port", s.Forwarding, what, port))
	case s.AllPorts || !single:
		return yamldoc.Verbatim(fmt.Sprintf("a %s needs a service with exactly one port", what))
	}
	return ""
}

func (b Backend) String() string {
	if b.Port == 0 {
		return b.Addr.String()
	}
	return netip.AddrPortFrom(b.Addr, b.Port).String()
}

// Notes says what a reader of an accepted configuration may not expect:
// for each `protocol: any` service, which protocols it balances. IPVS
// balances TCP, UDP and SCTP; a packet of another protocol to the VIP
// (ICMP echo, GRE, ESP, …) is the director's own.
func Notes(services []*Service) []string {
	var out []string
	for _, s := range services {
		if s.Protocol == "any" {
			out = append(out, fmt.Sprintf("%s:%d: service %q: protocol any balances TCP, UDP and SCTP to %s; packets of other protocols to the VIP (ICMP, GRE, ESP, …) go to the director's own stack",
				s.File, s.Line, s.Name, s.VIP))
		}
	}
	return out
}
