package config

import (
	"cmp"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/goccy/go-yaml"

	"github.com/lvsd/lvsd/agent/policy"
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
	Protocol   string      // tcp | udp | sctp | any
	Ports      []PortRange // sorted, non-overlapping
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
	// Gateway is the NAT real servers' default gateway on the director
	// (nat.gateway); invalid: none managed by lvsd. It moves with the VIP.
	Gateway netip.Addr
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
}

// Persistence is IPVS persistence (seed 000's per-session tracking).
type Persistence struct {
	Timeout time.Duration
	Netmask int // prefix length; 0 = the whole address
}

// DefaultDrainTimeout bounds how long a removed backend keeps its connections.
const DefaultDrainTimeout = 30 * time.Second

// PortRange is an inclusive range of ports; a single port has From == To.
type PortRange struct{ From, To uint16 }

func (r PortRange) String() string {
	if r.From == r.To {
		return strconv.Itoa(int(r.From))
	}
	return fmt.Sprintf("%d-%d", r.From, r.To)
}

// Backend is one real server of a service.
type Backend struct {
	Addr     netip.Addr
	Port     uint16 // 0: the port the client connected to
	Weight   int
	Failover bool    // in the failover pool (seed 000)
	Health   *Health // the service's, or the backend's own override; nil: not checked
}

// Weight bounds of a backend (IPVS accepts any non-negative int; Maglev
// precision makes larger values pointless).
const (
	MaxWeight     = 65535
	DefaultWeight = 1
)

type rawService struct {
	Service    string       `yaml:"service"`
	VIP        string       `yaml:"vip"`
	Protocol   string       `yaml:"protocol"`
	Ports      []any        `yaml:"ports"`
	Forwarding string       `yaml:"forwarding"`
	Scheduler  string       `yaml:"scheduler"`
	Affinity   string       `yaml:"affinity"`
	Backends   []rawBackend `yaml:"backends"`

	SourceRanges []string `yaml:"source_ranges"`
	FullNAT      struct {
		SourceAddresses []string `yaml:"source_addresses"`
	} `yaml:"fullnat"`
	NAT struct {
		Gateway string `yaml:"gateway"`
	} `yaml:"nat"`
	Tunnel      *rawTunnel `yaml:"tunnel"`
	Persistence *struct {
		Timeout string `yaml:"timeout"`
		Netmask *int   `yaml:"netmask"`
	} `yaml:"persistence"`
	PersistenceOnUnhealthy string       `yaml:"persistence_on_unhealthy"`
	DrainTimeout           string       `yaml:"drain_timeout"`
	Health                 *rawHealth   `yaml:"health"`
	Failover               *rawFailover `yaml:"failover"`
}

type rawBackend struct {
	Address  string     `yaml:"address"`
	Port     *int       `yaml:"port"`
	Weight   *int       `yaml:"weight"`
	Failover bool       `yaml:"failover"`
	Health   *rawHealth `yaml:"health"`
}

// LoadServices reads every *.yaml and *.yml file of dir, in name order, and
// validates each service and the set as a whole.
func LoadServices(dir string) ([]Service, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("reading services directory: %w", err)
	}
	var files []string
	for _, e := range entries {
		if !e.IsDir() && (strings.HasSuffix(e.Name(), ".yaml") || strings.HasSuffix(e.Name(), ".yml")) {
			files = append(files, filepath.Join(dir, e.Name()))
		}
	}
	return LoadServiceFiles(files...)
}

// LoadServiceFiles reads and validates the named service files as one set.
func LoadServiceFiles(files ...string) ([]Service, error) {
	var errs List
	var all []Service
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			errs = append(errs, &Error{File: f, Msg: err.Error()})
			continue
		}
		all = append(all, parseServices(f, data, &errs)...)
	}
	checkSet(all, &errs)
	if len(errs) > 0 {
		return nil, errs
	}
	return all, nil
}

func parseServices(file string, data []byte, errs *List) []Service {
	var out []Service
	for _, d := range parseDocs(file, data, errs) {
		var raw rawService
		if err := yaml.NodeToValue(d.body, &raw, yaml.Strict()); err != nil {
			*errs = append(*errs, yamlError(file, err))
			continue
		}
		before := len(*errs)
		svc := d.service(raw)
		if len(*errs) == before {
			out = append(out, svc)
		}
	}
	return out
}

func (d *doc) service(raw rawService) Service {
	line, _ := d.position("$")
	s := Service{
		Name:       raw.Service,
		File:       d.file,
		Line:       line,
		Protocol:   orDefault(raw.Protocol, "tcp"),
		Forwarding: Forwarding(orDefault(raw.Forwarding, string(DR))),
		Scheduler:  orDefault(raw.Scheduler, "mh"),
		Affinity:   Affinity(orDefault(raw.Affinity, string(AffinityNone))),
	}
	if s.Name == "" {
		d.errorf("$", "service: a name is required")
	} else if strings.ContainsAny(s.Name, " \t/") {
		d.errorf("$.service", "service name %q must not contain spaces or slashes", s.Name)
	}
	vip, err := netip.ParseAddr(raw.VIP)
	switch {
	case raw.VIP == "":
		d.errorf("$", "service %q: vip is required", s.Name)
	case err != nil:
		d.errorf("$.vip", "service %q: vip %q is not an IP address", s.Name, raw.VIP)
	case vip.Zone() != "" || vip.IsUnspecified() || vip.IsMulticast() || vip.IsLoopback():
		d.errorf("$.vip", "service %q: vip %s must be a unicast address", s.Name, raw.VIP)
	default:
		s.VIP = vip.Unmap()
	}
	if !oneOf(s.Protocol, "tcp", "udp", "sctp", "any") {
		d.errorf("$.protocol", "service %q: protocol %q is not one of tcp, udp, sctp, any", s.Name, s.Protocol)
	}
	s.Ports, s.AllPorts = d.ports(s.Name, raw.Ports)
	if !oneOf(string(s.Forwarding), string(DR), string(NAT), string(FullNAT), string(Tunnel)) {
		d.errorf("$.forwarding", "service %q: forwarding %q is not one of dr, nat, fullnat, tunnel", s.Name, s.Forwarding)
	}
	if !slices.Contains(Schedulers, s.Scheduler) {
		d.errorf("$.scheduler", "service %q: scheduler %q is not one of %s", s.Name, s.Scheduler, strings.Join(Schedulers, ", "))
	}
	if !oneOf(string(s.Affinity), string(AffinityNone), string(AffinityClientIP), string(AffinityClientIPProto), string(AffinityClientIPPortProto)) {
		d.errorf("$.affinity", "service %q: affinity %q is not one of none, client-ip, client-ip-proto, client-ip-port-proto", s.Name, s.Affinity)
	}
	if s.Protocol == "any" && !s.AllPorts && len(s.Ports) > 0 {
		d.errorf("$.ports", "service %q: protocol any takes every port: write ports: [all]", s.Name)
	}
	s.Health = d.health("$.health", s.Name, raw.Health, nil)
	s.Backends = d.backends(s, raw.Backends)
	s.Failover = d.failover(s.Name, raw.Failover, slices.ContainsFunc(s.Backends, func(b Backend) bool { return b.Failover }))
	d.checkPorts(s)
	s.SourceRanges = d.sourceRanges(s, raw.SourceRanges)
	s.SNATAddresses = d.snatAddresses(s, raw.FullNAT.SourceAddresses)
	s.Gateway = d.gateway(s, raw.NAT.Gateway)
	s.Tunnel = d.tunnel(s, raw.Tunnel)
	s.DrainTimeout = d.duration("$.drain_timeout", s.Name, "drain_timeout", raw.DrainTimeout, DefaultDrainTimeout)
	if p := raw.Persistence; p != nil {
		s.Persistence.Timeout = d.duration("$.persistence.timeout", s.Name, "persistence timeout", p.Timeout, 300*time.Second)
		if s.Persistence.Timeout < time.Second {
			d.errorf("$.persistence.timeout", "service %q: persistence timeout must be at least 1s", s.Name)
		}
		if p.Netmask != nil {
			if *p.Netmask < 1 || *p.Netmask > s.VIP.BitLen() && s.VIP.IsValid() {
				d.errorf("$.persistence.netmask", "service %q: persistence netmask /%d is not in 1-%d", s.Name, *p.Netmask, max(s.VIP.BitLen(), 32))
			} else if *p.Netmask != s.VIP.BitLen() {
				s.Persistence.Netmask = *p.Netmask
			}
		}
	}
	s.PersistenceOnUnhealthy = policy.Persistence(orDefault(raw.PersistenceOnUnhealthy, string(policy.DefaultForProtocol)))
	if err := s.PersistenceOnUnhealthy.Validate(s.Tracking()); err != nil {
		d.errorf("$.persistence_on_unhealthy", "service %q: %v", s.Name, err)
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

func (d *doc) sourceRanges(s Service, raw []string) []netip.Prefix {
	var out []netip.Prefix
	for i, r := range raw {
		path := fmt.Sprintf("$.source_ranges[%d]", i)
		p, err := netip.ParsePrefix(r)
		switch {
		case err != nil:
			d.errorf(path, "service %q: source range %q is not a CIDR prefix like 192.0.2.0/24", s.Name, r)
			continue
		case p.Masked() != p:
			d.errorf(path, "service %q: source range %s has host bits set (did you mean %s?)", s.Name, p, p.Masked())
			continue
		case p.Bits() == 0:
			d.errorf(path, "service %q: source range %s matches every client; leave source_ranges out instead", s.Name, p)
			continue
		case s.VIP.IsValid() && p.Addr().Is4() != s.VIP.Is4():
			d.errorf(path, "service %q: source range %s and vip %s are of different IP families", s.Name, p, s.VIP)
			continue
		case slices.Contains(out, p):
			d.errorf(path, "service %q: source range %s is listed twice", s.Name, p)
			continue
		}
		out = append(out, p)
	}
	slices.SortFunc(out, func(a, b netip.Prefix) int {
		return cmp.Or(a.Addr().Compare(b.Addr()), cmp.Compare(a.Bits(), b.Bits()))
	})
	return out
}

func (d *doc) snatAddresses(s Service, raw []string) []netip.Addr {
	if s.Forwarding != FullNAT {
		if len(raw) > 0 {
			d.errorf("$.fullnat", "service %q: fullnat.source_addresses needs forwarding: fullnat", s.Name)
		}
		return nil
	}
	if len(raw) == 0 {
		d.errorf("$", "service %q: forwarding fullnat needs fullnat.source_addresses (the director's SNAT addresses)", s.Name)
		return nil
	}
	var out []netip.Addr
	for i, r := range raw {
		path := fmt.Sprintf("$.fullnat.source_addresses[%d]", i)
		a, err := netip.ParseAddr(r)
		switch {
		case err != nil:
			d.errorf(path, "service %q: SNAT address %q is not an IP address", s.Name, r)
			continue
		case s.VIP.IsValid() && a.Unmap().Is4() != s.VIP.Is4():
			d.errorf(path, "service %q: SNAT address %s and vip %s are of different IP families", s.Name, a, s.VIP)
			continue
		}
		out = append(out, a.Unmap())
	}
	slices.SortFunc(out, netip.Addr.Compare)
	for i := 1; i < len(out); i++ {
		if out[i] != out[i-1].Next() {
			d.errorf("$.fullnat.source_addresses", "service %q: SNAT addresses must be consecutive (one nftables range); %s does not follow %s", s.Name, out[i], out[i-1])
			break
		}
	}
	return out
}

// gateway parses nat.gateway: the address the real servers of a NAT
// service route through, held by the director that holds the VIP.
func (d *doc) gateway(s Service, raw string) netip.Addr {
	if raw == "" {
		return netip.Addr{}
	}
	if s.Forwarding != NAT {
		d.errorf("$.nat.gateway", "service %q: nat.gateway needs forwarding: nat (FULLNAT real servers reply to the source addresses)", s.Name)
		return netip.Addr{}
	}
	a, err := netip.ParseAddr(raw)
	switch {
	case err != nil || a.Zone() != "":
		d.errorf("$.nat.gateway", "service %q: nat.gateway %q is not an IP address", s.Name, raw)
	case a.IsUnspecified() || a.IsMulticast() || a.IsLoopback():
		d.errorf("$.nat.gateway", "service %q: nat.gateway %s must be a unicast address", s.Name, raw)
	case s.VIP.IsValid() && a.Unmap().Is4() != s.VIP.Is4():
		d.errorf("$.nat.gateway", "service %q: nat.gateway %s and vip %s are of different IP families", s.Name, a, s.VIP)
	case a.Unmap() == s.VIP:
		d.errorf("$.nat.gateway", "service %q: nat.gateway must not be the vip", s.Name)
	default:
		return a.Unmap()
	}
	return netip.Addr{}
}

// Addresses are the addresses the director holding the VIP puts on its
// interface: the VIP, the FULLNAT source addresses real servers reply to
// and the NAT gateway they route through. They move together.
func (s Service) Addresses() []netip.Addr {
	out := append([]netip.Addr{s.VIP}, s.SNATAddresses...)
	if s.Gateway.IsValid() {
		out = append(out, s.Gateway)
	}
	return out
}

func (d *doc) duration(path, name, what, raw string, def time.Duration) time.Duration {
	if raw == "" {
		return def
	}
	v, err := time.ParseDuration(raw)
	if err != nil || v < 0 {
		d.errorf(path, "service %q: %s %q is not a duration like 30s or 5m", name, what, raw)
		return def
	}
	return v
}

// ports accepts numbers, "from-to" ranges and the single word "all".
func (d *doc) ports(name string, raw []any) ([]PortRange, bool) {
	if len(raw) == 0 {
		d.errorf("$", "service %q: ports is required (a list of ports, ranges \"8000-8099\", or [all])", name)
		return nil, false
	}
	var out []PortRange
	for i, p := range raw {
		path := fmt.Sprintf("$.ports[%d]", i)
		s := strings.TrimSpace(fmt.Sprint(p))
		if s == "all" {
			if len(raw) != 1 {
				d.errorf(path, "service %q: \"all\" cannot be combined with other ports", name)
			}
			return nil, true
		}
		from, to, isRange := strings.Cut(s, "-")
		lo, err1 := parsePort(from)
		hi, err2 := lo, error(nil)
		if isRange {
			hi, err2 = parsePort(to)
		}
		switch {
		case err1 != nil || err2 != nil:
			d.errorf(path, "service %q: port %q is not a port (1-65535), a range \"from-to\" or \"all\"", name, s)
			continue
		case hi < lo:
			d.errorf(path, "service %q: port range %q ends before it starts", name, s)
			continue
		}
		out = append(out, PortRange{lo, hi})
	}
	slices.SortFunc(out, func(a, b PortRange) int { return cmp.Compare(a.From, b.From) })
	for i := 1; i < len(out); i++ {
		if out[i].From <= out[i-1].To {
			d.errorf("$.ports", "service %q: ports %s and %s overlap", name, out[i-1], out[i])
		}
	}
	return out, false
}

func parsePort(s string) (uint16, error) {
	n, err := strconv.Atoi(strings.TrimSpace(s))
	if err != nil || n < 1 || n > 65535 {
		return 0, fmt.Errorf("bad port %q", s)
	}
	return uint16(n), nil
}

func (d *doc) backends(s Service, raw []rawBackend) []Backend {
	if len(raw) == 0 {
		d.errorf("$", "service %q: backends is required (at least one real server)", s.Name)
		return nil
	}
	var out []Backend
	seen := map[netip.AddrPort]bool{}
	for i, rb := range raw {
		path := fmt.Sprintf("$.backends[%d]", i)
		addr, err := netip.ParseAddr(rb.Address)
		if err != nil {
			d.errorf(path+".address", "service %q: backend address %q is not an IP address", s.Name, rb.Address)
			continue
		}
		addr = addr.Unmap()
		b := Backend{Addr: addr, Weight: DefaultWeight, Failover: rb.Failover,
			Health: d.health(path+".health", s.Name, rb.Health, s.Health)}
		if s.VIP.IsValid() && addr.Is4() != s.VIP.Is4() {
			why := ""
			if s.Forwarding == Tunnel {
				// The kernel could tunnel across families, but its
				// connection sync refuses to run with such services.
				why = " (lvsd tunnels within one family: IPVS connection sync cannot carry mixed-family services)"
			}
			d.errorf(path+".address", "service %q: backend %s and vip %s are of different IP families%s", s.Name, addr, s.VIP, why)
		}
		if rb.Port != nil {
			if *rb.Port < 1 || *rb.Port > 65535 {
				d.errorf(path+".port", "service %q: backend port %d is not in 1-65535", s.Name, *rb.Port)
			} else {
				b.Port = uint16(*rb.Port)
			}
		}
		if b.Port != 0 && (s.Forwarding == DR || s.Forwarding == Tunnel) && !(len(s.Ports) == 1 && s.Ports[0].From == s.Ports[0].To && s.Ports[0].From == b.Port) {
			d.errorf(path+".port", "service %q: forwarding %s cannot change the port (backend port %d); real servers receive the service port, so omit port", s.Name, s.Forwarding, b.Port)
		}
		if b.Port != 0 && (s.AllPorts || len(s.Ports) > 1 || len(s.Ports) == 1 && s.Ports[0].From != s.Ports[0].To) {
			d.errorf(path+".port", "service %q: a backend port needs a service with exactly one port", s.Name)
		}
		if rb.Weight != nil {
			if *rb.Weight < 0 || *rb.Weight > MaxWeight {
				d.errorf(path+".weight", "service %q: weight %d is not in 0-%d", s.Name, *rb.Weight, MaxWeight)
			}
			b.Weight = *rb.Weight
		}
		key := netip.AddrPortFrom(b.Addr, b.Port)
		if seen[key] {
			d.errorf(path+".address", "service %q: backend %s is listed twice", s.Name, b)
		}
		seen[key] = true
		out = append(out, b)
	}
	slices.SortFunc(out, func(a, b Backend) int {
		return cmp.Or(a.Addr.Compare(b.Addr), cmp.Compare(a.Port, b.Port))
	})
	return out
}

// checkSet finds conflicts between services: the same name twice, or two
// services claiming the same VIP, protocol and port.
func checkSet(all []Service, errs *List) {
	names := map[string]Service{}
	for _, s := range all {
		if prev, ok := names[s.Name]; ok {
			*errs = append(*errs, &Error{File: s.File, Line: s.Line, Col: 1,
				Msg: fmt.Sprintf("service %q is already defined at %s:%d", s.Name, prev.File, prev.Line)})
			continue
		}
		names[s.Name] = s
	}
	for i, a := range all {
		for _, b := range all[:i] {
			if a.VIP != b.VIP || !protocolsOverlap(a.Protocol, b.Protocol) || !sourcesCollide(a.SourceRanges, b.SourceRanges) {
				continue
			}
			if r, ok := portsOverlap(a, b); ok {
				*errs = append(*errs, &Error{File: a.File, Line: a.Line, Col: 1,
					Msg: fmt.Sprintf("service %q: %s %s port %s is already served by service %q (%s:%d)", a.Name, a.Protocol, a.VIP, r, b.Name, b.File, b.Line)})
			}
		}
	}
}

// sourcesCollide reports whether two services on the same VIP and ports would
// claim the same clients: steering lets them differ by source prefix, the
// longest prefix winning, but not share one (or both take everyone).
func sourcesCollide(a, b []netip.Prefix) bool {
	if len(a) == 0 || len(b) == 0 {
		return len(a) == len(b)
	}
	for _, p := range a {
		if slices.Contains(b, p) {
			return true
		}
	}
	return false
}

func protocolsOverlap(a, b string) bool { return a == b || a == "any" || b == "any" }

func portsOverlap(a, b Service) (string, bool) {
	if a.AllPorts || b.AllPorts {
		return "all", true
	}
	for _, x := range a.Ports {
		for _, y := range b.Ports {
			if x.From <= y.To && y.From <= x.To {
				return PortRange{max(x.From, y.From), min(x.To, y.To)}.String(), true
			}
		}
	}
	return "", false
}

func (b Backend) String() string {
	if b.Port == 0 {
		return b.Addr.String()
	}
	return netip.AddrPortFrom(b.Addr, b.Port).String()
}
