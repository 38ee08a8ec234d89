package config

import (
	"net/netip"
	"slices"
	"time"

	"github.com/lvsd/lvsd/agent/config/yamldoc"
	"github.com/lvsd/lvsd/ipvs/spec"
)

// IPVS is the agent file's ipvs block: settings of the kernel's IPVS that
// hold for the whole network namespace, every service in it (lvsd's and
// anyone else's), which is why they are the agent's and not a service's.
type IPVS struct {
	// Timeouts are the idle timeouts of connection entries lvsd sets; a
	// zero field leaves the kernel's value as it is (docs/configuration.md).
	Timeouts spec.Timeouts
}

type rawIPVS struct {
	Timeouts *struct {
		TCP    yamldoc.Text `yaml:"tcp"`
		TCPFin yamldoc.Text `yaml:"tcp_fin"`
		UDP    yamldoc.Text `yaml:"udp"`
	} `yaml:"timeouts"`
}

// ipvsBlock validates the ipvs block, which only a director reads.
func (d *doc) ipvsBlock(role Role, raw *rawIPVS) IPVS {
	if raw == nil {
		return IPVS{}
	}
	if role != RoleDirector {
		d.Errorf("$.ipvs", "ipvs is for role director; a real server has no IPVS services")
		return IPVS{}
	}
	var out IPVS
	if t := raw.Timeouts; t != nil {
		out.Timeouts = spec.Timeouts{
			TCP:    d.ipvsTimeout("tcp", string(t.TCP)),
			TCPFin: d.ipvsTimeout("tcp_fin", string(t.TCPFin)),
			UDP:    d.ipvsTimeout("udp", string(t.UDP)),
		}
	}
	return out
}

// ipvsTimeout reads one timeout: a duration in whole seconds up to
// spec.MaxTimeout; 0 (or absent) leaves the kernel's.
func (d *doc) ipvsTimeout(key, raw string) time.Duration {
	if raw == "" || raw == "0" {
		return 0
	}
	path := "$.ipvs.timeouts." + key
	v, err := time.ParseDuration(raw)
	if err != nil {
		d.Errorf(path, "timeout %s %q is not a duration like 60s or 15m (0 keeps the kernel's)", key, raw)
		return 0
	}
	if err := spec.ValidateTimeout(v); err != nil {
		d.Errorf(path, "timeout %s: %v (0 keeps the kernel's)", key, err)
		return 0
	}
	return v
}

// thresholds reads a backend's connection limits: lower needs upper and
// must not be above it (the kernel refuses both with ERANGE).
func (d *doc) thresholds(path, name string, b *Backend, rb rawBackend) {
	if rb.UpperThreshold != nil {
		b.UpperThreshold = uint32(*rb.UpperThreshold) // 1-2147483647: its range tag
	}
	if rb.LowerThreshold == nil {
		return
	}
	b.LowerThreshold = uint32(*rb.LowerThreshold)
	switch {
	case b.UpperThreshold == 0:
		d.Errorf(path+".lower_threshold", "service %q: backend %s: lower_threshold needs upper_threshold (it says when a backend at its upper threshold takes new connections again)", name, b)
	case b.LowerThreshold > b.UpperThreshold:
		d.Errorf(path+".lower_threshold", "service %q: backend %s: lower_threshold %d is above upper_threshold %d", name, b, b.LowerThreshold, b.UpperThreshold)
	}
}

// sorryServer reads sorry_server, ADDRESS or ADDRESS:PORT ([v6]:PORT):
// where new connections go while no backend is eligible. Its port follows
// a backend's rules; it must not be one of the backends.
func (d *doc) sorryServer(s Service, raw string) netip.AddrPort {
	if raw == "" {
		return netip.AddrPort{}
	}
	const path = "$.sorry_server"
	ap, err := netip.ParseAddrPort(raw)
	if err != nil {
		a, aerr := netip.ParseAddr(raw)
		if aerr != nil || a.Zone() != "" {
			d.Errorf(path, "service %q: sorry_server %q is not an address or address:port ([v6]:port)", s.Name, raw)
			return netip.AddrPort{}
		}
		ap = netip.AddrPortFrom(a, 0)
	}
	a := ap.Addr().Unmap()
	ap = netip.AddrPortFrom(a, ap.Port())
	switch {
	case a.Zone() != "" || a.IsUnspecified() || a.IsMulticast() || a.IsLoopback():
		d.Errorf(path, "service %q: sorry_server %s must be a unicast address", s.Name, raw)
	case s.VIP.IsValid() && a.Is4() != s.VIP.Is4():
		d.Errorf(path, "service %q: sorry_server %s and vip %s are of different IP families", s.Name, a, s.VIP)
	case a == s.VIP:
		d.Errorf(path, "service %q: sorry_server must not be the vip", s.Name)
	case slices.ContainsFunc(s.Backends, func(b Backend) bool { return b.Addr == a && b.Port == ap.Port() }):
		d.Errorf(path, "service %q: sorry_server %s is one of the backends; it takes connections only while no backend is eligible", s.Name, raw)
	default:
		if why := portRefused(s, "sorry_server port", ap.Port()); why != "" {
			d.Errorf(path, "service %q: sorry_server %s: %s", s.Name, raw, why)
			return netip.AddrPort{}
		}
		return ap
	}
	return netip.AddrPort{}
}
