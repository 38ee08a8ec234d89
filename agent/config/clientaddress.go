// The client_address keys: how a FULLNAT real server learns the client's
// address (TOA, docs/toa.md), on the director's services and in the real
// server's agent file.

package config

import (
	"fmt"
	"net/netip"
	"path/filepath"
	"slices"

	"github.com/lvsd/lvsd/ipvs/l4"
)

// ClientAddress is what a FULLNAT real server sees as the peer of a
// connection: "" the director's source address (the default), or TOA the
// client's, carried in a TCP option of the SYN.
type ClientAddress string

// Client address modes. The default is the zero value, so the services
// that do not set client_address keep the digest of a release without it.
const (
	ClientAddressDirector ClientAddress = ""
	ClientAddressTOA      ClientAddress = "toa"
)

// MaxTOAPorts bounds the VIP:ports a director or a real server gives TOA:
// the programs' service maps hold 4096 entries.
const MaxTOAPorts = 4096

// DefaultTOACgroup is the cgroup v2 folder the real server's programs
// attach to: the root, which holds every application.
const DefaultTOACgroup = "/sys/fs/cgroup"

// clientAddress validates a service's client_address. "director", the
// default written out, is the zero value.
func (d *doc) clientAddress(s Service, raw string) ClientAddress {
	switch raw {
	case "", "director":
		return ClientAddressDirector
	case string(ClientAddressTOA):
	default:
		d.Errorf("$.client_address", "service %q: client_address %q is not one of toa, director", s.Name, raw)
		return ClientAddressDirector
	}
	switch {
	case s.Forwarding != FullNAT:
		d.Errorf("$.client_address", "service %q: client_address toa needs forwarding: fullnat (with %s the real servers see the client's address already, or cannot be told it)", s.Name, s.Forwarding)
	case s.Protocol != "tcp":
		d.Errorf("$.client_address", "service %q: client_address toa needs protocol tcp (the address travels in a TCP option)", s.Name)
	case s.AllPorts:
		d.Errorf("$.client_address", "service %q: client_address toa needs the service's ports listed, not [all] (the director's program looks each VIP:port up)", s.Name)
	case portCount(s.Ports) > MaxTOAPorts:
		d.Errorf("$.client_address", "service %q: client_address toa takes at most %d ports (the program's map); the service has %d", s.Name, MaxTOAPorts, portCount(s.Ports))
	}
	return ClientAddressTOA
}

func portCount(ports []l4.PortRange) int {
	n := 0
	for _, p := range ports {
		n += int(p.To) - int(p.From) + 1
	}
	return n
}

// RealServerTOA is the validated realserver.client_address block: the
// real server's TOA programs and what they act on.
type RealServerTOA struct {
	// Directors are the directors' FULLNAT source addresses: only SYNs
	// from them are believed to carry a client's address.
	Directors []netip.Addr
	// Backends are where the directors' connections arrive: this host's
	// address and port as the services' backends name it.
	Backends []netip.AddrPort
	// Cgroup is the cgroup v2 folder that holds the applications.
	Cgroup string
}

// Enabled reports whether the block asks for the programs.
func (t RealServerTOA) Enabled() bool { return len(t.Backends) > 0 }

type rawRealServerTOA struct {
	Mode      string   `yaml:"mode"`
	Directors []string `yaml:"directors"`
	Backends  []string `yaml:"backends"`
	Cgroup    string   `yaml:"cgroup"`
}

func (d *doc) realServerTOA(raw *rawRealServerTOA) RealServerTOA {
	if raw == nil {
		return RealServerTOA{}
	}
	const at = "$.realserver.client_address"
	if raw.Mode != string(ClientAddressTOA) {
		d.Errorf(at+".mode", "client_address mode %q is not toa (the only mode; leave the block out for none)", raw.Mode)
	}
	t := RealServerTOA{Cgroup: DefaultTOACgroup}
	if raw.Cgroup != "" {
		t.Cgroup = filepath.Clean(raw.Cgroup)
		if !filepath.IsAbs(raw.Cgroup) {
			d.Errorf(at+".cgroup", "client_address cgroup %q is not an absolute path like /sys/fs/cgroup", raw.Cgroup)
		}
	}
	if len(raw.Directors) == 0 {
		d.Errorf(at, "client_address needs directors: the directors' FULLNAT source addresses (fullnat.source_addresses of the services)")
	}
	for i, r := range raw.Directors {
		path := fmt.Sprintf("%s.directors[%d]", at, i)
		a, err := netip.ParseAddr(r)
		switch {
		case err != nil || a.Zone() != "" || !a.Unmap().IsGlobalUnicast():
			d.Errorf(path, "client_address director %q is not a unicast IP address (a director's FULLNAT source address)", r)
		case slices.Contains(t.Directors, a.Unmap()):
			d.Errorf(path, "client_address director %s is listed twice", a.Unmap())
		default:
			t.Directors = append(t.Directors, a.Unmap())
		}
	}
	if len(raw.Backends) == 0 {
		d.Errorf(at, "client_address needs backends: this host's address:port as the services' backends name it, like 10.0.1.11:80")
	}
	if len(raw.Backends) > MaxTOAPorts {
		d.Errorf(at+".backends", "client_address takes at most %d backends (the program's map); there are %d", MaxTOAPorts, len(raw.Backends))
	}
	for i, r := range raw.Backends {
		path := fmt.Sprintf("%s.backends[%d]", at, i)
		ap, err := netip.ParseAddrPort(r)
		switch {
		case err != nil || ap.Port() == 0 || ap.Addr().Zone() != "":
			d.Errorf(path, "client_address backend %q is not an address and port like 10.0.1.11:80 or [fd00::11]:80", r)
		case !ap.Addr().Unmap().IsGlobalUnicast():
			d.Errorf(path, "client_address backend %s is not a unicast address the directors can connect to", ap)
		default:
			ap = netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
			if slices.Contains(t.Backends, ap) {
				d.Errorf(path, "client_address backend %s is listed twice", ap)
				continue
			}
			t.Backends = append(t.Backends, ap)
		}
	}
	return t
}
