package bgp

import (
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"time"

	"github.com/lvsd/lvsd/cluster/bfd"
)

// Config configures a Speaker.
type Config struct {
	// ASN is the local autonomous system number (4-byte ASNs work).
	ASN uint32
	// RouterID is the BGP identifier, an IPv4 address unique among the
	// routers' peers (usually the director's own IPv4 address).
	RouterID netip.Addr
	// ListenAddresses, when set, are the addresses the speaker accepts
	// sessions on (from configured peers only), on ListenPort (default
	// 179 then). Without them and with ListenPort zero it only dials out
	// and nothing listens on the director; ListenPort alone listens on
	// every address (kept for configurations written before
	// ListenAddresses existed).
	ListenAddresses []netip.Addr
	ListenPort      uint16
	Peers           []PeerConfig
	// NextHop4 and NextHop6 are the next hop of routes of their family
	// that leave NextHop unset, when it must not be the session's own
	// address: a session of one family carrying routes of the other
	// (IPv6 routes over an IPv4 session need an IPv6 next hop). Zero:
	// the local address of each session ("next hop self").
	NextHop4, NextHop6 netip.Addr
	// BFD runs the BFD sessions of peers with BFD set; required then.
	BFD BFD
	// MD5Hint is how long a peer with a password may stay without a
	// session before the log says so, with the kernel's TCP-MD5 failure
	// count (default 10 s).
	MD5Hint time.Duration
	// GracefulRestart advertises graceful restart (RFC 4724) to every
	// peer, so that a stop with CloseForRestart leaves the routes at the
	// routers while the kernel forwards (graceful.go).
	GracefulRestart GracefulRestart
	// Restarting: this speaker follows one that stopped with
	// CloseForRestart. It opens its sessions as a restarting speaker
	// (Restart and Forwarding State bits set) once the first routes are
	// in, so that its End-of-RIB follows them.
	Restarting bool
	Log        *slog.Logger

	// netstat reads /proc/net/netstat (tests replace it).
	netstat func() ([]byte, error)
	// prefixLimitRetry is how long a session closed for passing the hard
	// prefix limit stays down (default prefixLimitRetry; tests shorten it).
	prefixLimitRetry time.Duration
}

// PeerConfig is one BGP neighbour (a router).
type PeerConfig struct {
	Address netip.Addr
	ASN     uint32 // the same as Config.ASN makes it iBGP
	Port    uint16 // default 179
	// LocalAddress is the source of the session (and of its BFD
	// session); zero lets the kernel choose.
	LocalAddress netip.Addr
	// Interface binds the session (and BFD) to a device.
	Interface string
	// Password enables TCP-MD5 (RFC 2385); it must match the router's.
	Password string
	// Timers, whole seconds. Defaults: hold 9 s, keepalive hold/3,
	// connect retry 2 s. Hold is 0 (no keepalives) or at least 3 s.
	HoldTime, KeepaliveInterval, ConnectRetry time.Duration
	// Families the session carries; default the family of Address.
	Families []Family
	// BFD couples the session to a BFD session with the peer, as FRR's
	// "neighbor X bfd": when BFD goes down the BGP session is taken
	// down, and it may come back only once BFD is up again.
	BFD       bool
	BFDTimers bfd.Timers
	// MaxPrefixes is how many prefixes the router may send before the
	// speaker warns (default 100). Nothing received is imported either
	// way and the session stays: a router that sends routes is
	// misconfigured, not a reason to stop announcing. Only past
	// hardPrefixFactor times as many does GoBGP close the session, which
	// bounds the memory its table of received routes takes.
	MaxPrefixes uint32
}

// Defaults of PeerConfig.
const (
	DefaultHoldTime     = 9 * time.Second
	DefaultConnectRetry = 2 * time.Second
	DefaultMD5Hint      = 10 * time.Second
	DefaultMaxPrefixes  = 100
	bgpPort             = 179
	minHoldTime         = 3 * time.Second
)

// withDefaults validates the configuration and fills in defaults; errors
// name the field.
func (c Config) withDefaults() (Config, error) {
	var errs []error
	if c.ASN == 0 {
		errs = append(errs, errors.New("bgp: local ASN missing"))
	}
	if !c.RouterID.Is4() || c.RouterID.IsUnspecified() {
		errs = append(errs, fmt.Errorf("bgp: router id %v must be an IPv4 address", c.RouterID))
	}
	if c.NextHop4.IsValid() && !c.NextHop4.Is4() {
		errs = append(errs, fmt.Errorf("bgp: next hop for IPv4 routes %s is not IPv4", c.NextHop4))
	}
	if c.NextHop6.IsValid() && (!c.NextHop6.Is6() || c.NextHop6.Is4In6()) {
		errs = append(errs, fmt.Errorf("bgp: next hop for IPv6 routes %s is not IPv6", c.NextHop6))
	}
	if c.MD5Hint <= 0 {
		c.MD5Hint = DefaultMD5Hint
	}
	if err := c.GracefulRestart.validate(); err != nil {
		errs = append(errs, err)
	}
	if c.GracefulRestart.Enabled && c.GracefulRestart.RestartTime == 0 {
		c.GracefulRestart.RestartTime = DefaultRestartTime
	}
	if c.Log == nil {
		c.Log = slog.Default()
	}
	if c.netstat == nil {
		c.netstat = readNetstat
	}
	if c.prefixLimitRetry <= 0 {
		c.prefixLimitRetry = prefixLimitRetry
	}
	listening := map[netip.Addr]bool{}
	c.ListenAddresses = slices.Clone(c.ListenAddresses) // the caller's stays as given
	for i, a := range c.ListenAddresses {
		a = a.Unmap()
		switch {
		case !a.IsValid() || a.IsUnspecified() || a.IsMulticast():
			errs = append(errs, fmt.Errorf("bgp: listen address %v must be one of this director's unicast addresses", a))
		case a.Zone() != "":
			errs = append(errs, fmt.Errorf("bgp: listen address %s must not have a zone", a))
		case listening[a]:
			errs = append(errs, fmt.Errorf("bgp: listen address %s given twice", a))
		}
		listening[a] = true
		c.ListenAddresses[i] = a
	}
	if len(c.ListenAddresses) > 0 && c.ListenPort == 0 {
		c.ListenPort = bgpPort
	}
	seen := map[netip.Addr]bool{}
	peers := make([]PeerConfig, len(c.Peers))
	for i, p := range c.Peers {
		p, err := p.withDefaults(c)
		if err != nil {
			errs = append(errs, err)
		}
		if seen[p.Address] {
			errs = append(errs, fmt.Errorf("bgp: peer %s configured twice", p.Address))
		}
		seen[p.Address] = true
		peers[i] = p
	}
	c.Peers = peers
	return c, errors.Join(errs...)
}

func (p PeerConfig) withDefaults(c Config) (PeerConfig, error) {
	p.Address, p.LocalAddress = p.Address.Unmap(), p.LocalAddress.Unmap()
	name := fmt.Sprintf("bgp: peer %s", p.Address)
	var errs []error
	switch {
	case !p.Address.IsValid():
		errs = append(errs, errors.New("bgp: a peer has no address"))
	case p.Address.IsUnspecified() || p.Address.IsMulticast():
		errs = append(errs, fmt.Errorf("%s: not a unicast address", name))
	case p.Address.Is6() && p.Address.IsLinkLocalUnicast() && p.Interface == "":
		errs = append(errs, fmt.Errorf("%s: a link-local peer needs an interface", name))
	}
	if p.ASN == 0 {
		errs = append(errs, fmt.Errorf("%s: peer ASN missing", name))
	}
	if p.LocalAddress.IsValid() && p.LocalAddress.Is4() != p.Address.Is4() {
		errs = append(errs, fmt.Errorf("%s: local address %s is of the other family", name, p.LocalAddress))
	}
	if len(p.Password) > 80 { // TCP_MD5SIG_MAXKEYLEN
		errs = append(errs, fmt.Errorf("%s: password longer than 80 bytes", name))
	}
	if p.Port == 0 {
		p.Port = bgpPort
	}
	if p.HoldTime == 0 {
		p.HoldTime = DefaultHoldTime
	}
	if p.KeepaliveInterval == 0 {
		p.KeepaliveInterval = p.HoldTime / 3
	}
	if p.ConnectRetry == 0 {
		p.ConnectRetry = DefaultConnectRetry
	}
	if p.MaxPrefixes == 0 {
		p.MaxPrefixes = DefaultMaxPrefixes
	}
	for _, d := range []struct {
		what string
		v    time.Duration
	}{{"hold time", p.HoldTime}, {"keepalive interval", p.KeepaliveInterval}, {"connect retry", p.ConnectRetry}} {
		if d.v < 0 || d.v%time.Second != 0 {
			errs = append(errs, fmt.Errorf("%s: %s %v must be whole seconds", name, d.what, d.v))
		}
	}
	if p.HoldTime > 0 && p.HoldTime < minHoldTime {
		errs = append(errs, fmt.Errorf("%s: hold time %v must be 0 or at least 3s (RFC 4271)", name, p.HoldTime))
	}
	if p.HoldTime > 0 && p.KeepaliveInterval > p.HoldTime/3 {
		// Integer seconds: 3 s hold allows a 1 s keepalive.
		errs = append(errs, fmt.Errorf("%s: keepalive interval %v must be at most a third of the hold time %v",
			name, p.KeepaliveInterval, p.HoldTime))
	}
	if len(p.Families) == 0 {
		p.Families = []Family{familyOf(p.Address)}
	}
	for _, f := range p.Families {
		switch {
		case f != IPv4Unicast && f != IPv6Unicast:
			errs = append(errs, fmt.Errorf("%s: unknown family %q (ipv4-unicast, ipv6-unicast)", name, f))
		case p.Address.IsValid() && f != familyOf(p.Address) && !c.nextHopFor(f).IsValid():
			errs = append(errs, fmt.Errorf("%s: %s routes over an %s session need a next hop of their family (NextHop4/NextHop6)",
				name, f, familyOf(p.Address)))
		}
	}
	if p.BFD && c.BFD == nil {
		errs = append(errs, fmt.Errorf("%s: BFD enabled but no BFD server given", name))
	}
	return p, errors.Join(errs...)
}

func familyOf(a netip.Addr) Family {
	if a.Is4() {
		return IPv4Unicast
	}
	return IPv6Unicast
}

func (c Config) nextHopFor(f Family) netip.Addr {
	if f == IPv4Unicast {
		return c.NextHop4
	}
	return c.NextHop6
}

// carries reports whether the peer's session carries family f.
func (p PeerConfig) carries(f Family) bool {
	for _, g := range p.Families {
		if g == f {
			return true
		}
	}
	return false
}

// external reports whether the session is eBGP.
func (p PeerConfig) external(local uint32) bool { return p.ASN != local }
