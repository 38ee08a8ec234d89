package config

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/lvsd/lvsd/agent/config/yamldoc"
	"github.com/lvsd/lvsd/cluster/bgp/route"
)

// BGP is the validated `bgp:` block of a director: it announces the VIPs it
// holds to the routers, which send their traffic here (with cluster mode
// ecmp, every director holds every VIP and the routers spread the flows
// over them: docs/ecmp.md). Its VIPs then sit on lo, not on the interface.
type BGP struct {
	ASN uint32
	// RouterID is the BGP identifier; zero: the director's own IPv4
	// address on its interface, resolved at start.
	RouterID netip.Addr
	// ListenAddresses are where the speaker accepts the sessions the
	// routers open, on ListenPort (179 by default then); ListenPort alone
	// listens on every address, and neither only dials.
	ListenAddresses    []netip.Addr
	ListenPort         uint16
	Peers              []BGPPeer
	NextHop4, NextHop6 netip.Addr
	// Announce holds the attributes every VIP is announced with; a
	// service's own `announce:` replaces them for its VIP.
	Announce Announce
	// WithoutBackends: withdraw (the default) takes a VIP's route away
	// while none of its services has an eligible backend; announce keeps it.
	WithoutBackends string
	// Drain is what `lvsd drain` on a director does: withdraw its routes
	// (the default), or deprefer them (DrainMED, DrainPrepend) so the
	// routers send new flows elsewhere while the path stays as a backup.
	Drain        string
	DrainMED     uint32
	DrainPrepend int
	// StopGrace is how long a director that stops waits after withdrawing,
	// serving what still arrives while the routers move the flows away.
	StopGrace time.Duration
	// GracefulRestart advertises BGP graceful restart (RFC 4724): a stop
	// under a restart hold then leaves the routes at the routers, which
	// keep them for RestartTime while the kernel forwards (docs/ecmp.md).
	GracefulRestart bool
	RestartTime     time.Duration
}

// BGPPeer is one router.
type BGPPeer struct {
	Address      netip.Addr
	ASN          uint32
	Port         uint16
	LocalAddress netip.Addr
	// Password is TCP-MD5's (RFC 2385), read from PasswordFile.
	Password     string
	PasswordFile string
	HoldTime     time.Duration
	Keepalive    time.Duration
	ConnectRetry time.Duration
	// BFD couples the session to BFD with the router (100 ms × 3 unless
	// BFDInterval and BFDMultiplier say otherwise).
	BFD           bool
	BFDInterval   time.Duration
	BFDMultiplier int
	Families      []route.Family
	// MaxPrefixes is how many prefixes the router may send before lvsd
	// warns (none is imported; see bgp.PeerConfig).
	MaxPrefixes uint32
}

// Announce are the path attributes of a VIP's route.
type Announce struct {
	Communities      []route.Community
	LargeCommunities []route.LargeCommunity
	LocalPref        uint32
	MED              *uint32
	ASPathPrepend    int
}

// Equal reports whether a and b announce alike.
func (a Announce) Equal(b Announce) bool {
	medEqual := a.MED == nil && b.MED == nil || a.MED != nil && b.MED != nil && *a.MED == *b.MED
	return slices.Equal(a.Communities, b.Communities) && slices.Equal(a.LargeCommunities, b.LargeCommunities) &&
		a.LocalPref == b.LocalPref && medEqual && a.ASPathPrepend == b.ASPathPrepend
}

// Defaults of the bgp block.
const (
	DefaultBFDInterval   = 100 * time.Millisecond
	DefaultBFDMultiplier = 3
	DefaultStopGrace     = 2 * time.Second
	DefaultDrainMED      = 1000
	DefaultMaxPrefixes   = 100
	DefaultRestartTime   = 30 * time.Second
	// MaxRestartTime is what the capability's 12 bits hold.
	MaxRestartTime = 4095 * time.Second
	minRestartTime = 5 * time.Second
)

type rawBGP struct {
	ASN             *int         `yaml:"asn" range:"1-4294967295"`
	RouterID        string       `yaml:"router_id"`
	ListenAddresses []string     `yaml:"listen_addresses"`
	ListenPort      *int         `yaml:"listen_port" range:"0-65535"`
	Peers           []rawPeer    `yaml:"peers"`
	NextHop4        string       `yaml:"next_hop4"`
	NextHop6        string       `yaml:"next_hop6"`
	Announce        *rawAnnounce `yaml:"announce"`
	WithoutBackends string       `yaml:"without_backends"`
	Drain           *struct {
		Mode          string `yaml:"mode"`
		MED           *int   `yaml:"med" range:"0-4294967295"`
		ASPathPrepend *int   `yaml:"as_path_prepend" range:"0-10"`
	} `yaml:"drain"`
	StopGrace       yamldoc.Text `yaml:"stop_grace"`
	GracefulRestart *struct {
		Enabled     *bool        `yaml:"enabled"`
		RestartTime yamldoc.Text `yaml:"restart_time"`
	} `yaml:"graceful_restart"`
}

type rawPeer struct {
	Address      string       `yaml:"address"`
	ASN          *int         `yaml:"asn" range:"1-4294967295"`
	Port         *int         `yaml:"port" range:"1-65535"`
	LocalAddress string       `yaml:"local_address"`
	PasswordFile string       `yaml:"password_file"`
	HoldTime     yamldoc.Text `yaml:"hold_time"`
	Keepalive    yamldoc.Text `yaml:"keepalive"`
	ConnectRetry yamldoc.Text `yaml:"connect_retry"`
	BFD          *struct {
		Enabled    *bool        `yaml:"enabled"`
		Interval   yamldoc.Text `yaml:"interval"`
		Multiplier *int         `yaml:"multiplier" range:"2-50"`
	} `yaml:"bfd"`
	Families    []string `yaml:"families"`
	MaxPrefixes *int     `yaml:"max_prefixes" range:"1-1000000"`
}

type rawAnnounce struct {
	Communities      []string `yaml:"communities"`
	LargeCommunities []string `yaml:"large_communities"`
	LocalPref        *int     `yaml:"local_pref" range:"0-4294967295"`
	MED              *int     `yaml:"med" range:"0-4294967295"`
	ASPathPrepend    *int     `yaml:"as_path_prepend" range:"0-10"`
}

// bgpBlock validates the bgp block of the agent file at file; nil: no BGP.
func (d *doc) bgpBlock(role Role, raw *rawBGP, file string) *BGP {
	if raw == nil {
		return nil
	}
	if role != RoleDirector {
		d.Errorf("$.bgp", "bgp is only for role director (role is %s)", role)
		return nil
	}
	b := &BGP{WithoutBackends: orDefault(raw.WithoutBackends, "withdraw"), Drain: "withdraw", DrainMED: DefaultDrainMED,
		StopGrace: d.durationIn("$.bgp.stop_grace", "stop_grace", string(raw.StopGrace), DefaultStopGrace, 0, time.Minute)}
	if raw.ASN == nil {
		d.Errorf("$.bgp", "asn is required: the directors' autonomous system number")
	} else {
		b.ASN = uint32(*raw.ASN)
	}
	if raw.RouterID != "" {
		if a, err := netip.ParseAddr(raw.RouterID); err == nil && a.Is4() {
			b.RouterID = a
		} else {
			d.Errorf("$.bgp.router_id", "router_id %q is not an IPv4 address (BGP identifiers are IPv4-shaped)", raw.RouterID)
		}
	}
	b.ListenAddresses = d.listenAddresses(raw.ListenAddresses)
	if raw.ListenPort != nil {
		b.ListenPort = uint16(*raw.ListenPort)
	}
	if len(b.ListenAddresses) > 0 && b.ListenPort == 0 {
		b.ListenPort = 179
	}
	b.NextHop4 = d.addrOfFamily("$.bgp.next_hop4", "next_hop4", raw.NextHop4, true)
	b.NextHop6 = d.addrOfFamily("$.bgp.next_hop6", "next_hop6", raw.NextHop6, false)
	if len(raw.Peers) == 0 {
		d.Errorf("$.bgp", "peers is required: the routers this director announces its VIPs to")
	}
	for i, p := range raw.Peers {
		if peer, ok := d.bgpPeer(fmt.Sprintf("$.bgp.peers[%d]", i), p, file); ok {
			if slices.ContainsFunc(b.Peers, func(o BGPPeer) bool { return o.Address == peer.Address }) {
				d.Errorf(fmt.Sprintf("$.bgp.peers[%d].address", i), "peer %s is listed twice", peer.Address)
				continue
			}
			b.Peers = append(b.Peers, peer)
		}
	}
	if raw.Announce != nil {
		b.Announce = d.announce("$.bgp.announce", raw.Announce)
	}
	b.RestartTime = DefaultRestartTime
	if gr := raw.GracefulRestart; gr != nil {
		b.GracefulRestart = gr.Enabled == nil || *gr.Enabled
		b.RestartTime = d.restartTime(string(gr.RestartTime))
	}
	if !oneOf(b.WithoutBackends, "withdraw", "announce") {
		d.Errorf("$.bgp.without_backends", "without_backends %q is not one of withdraw, announce", b.WithoutBackends)
	}
	if dr := raw.Drain; dr != nil {
		b.Drain = orDefault(dr.Mode, "withdraw")
		if !oneOf(b.Drain, "withdraw", "deprefer") {
			d.Errorf("$.bgp.drain.mode", "drain mode %q is not one of withdraw, deprefer", dr.Mode)
		}
		if dr.MED != nil {
			b.DrainMED = uint32(*dr.MED)
		}
		if dr.ASPathPrepend != nil {
			b.DrainPrepend = *dr.ASPathPrepend
		}
		if b.Drain == "withdraw" && (dr.MED != nil || dr.ASPathPrepend != nil) {
			d.Errorf("$.bgp.drain", "med and as_path_prepend are for drain mode deprefer; mode withdraw takes the routes away")
		}
	}
	return b
}

func (d *doc) bgpPeer(path string, raw rawPeer, file string) (BGPPeer, bool) {
	p := BGPPeer{BFDInterval: DefaultBFDInterval, BFDMultiplier: DefaultBFDMultiplier, MaxPrefixes: DefaultMaxPrefixes}
	a, err := netip.ParseAddr(raw.Address)
	if err != nil || a.Zone() != "" {
		d.Errorf(path+".address", "address %q is not the router's IP address", raw.Address)
		return p, false
	}
	p.Address = a
	if raw.ASN == nil {
		d.Errorf(path, "peer %s: asn is required (the router's AS; the directors' own makes it iBGP)", a)
	} else {
		p.ASN = uint32(*raw.ASN)
	}
	if raw.Port != nil {
		p.Port = uint16(*raw.Port)
	}
	if raw.LocalAddress != "" {
		p.LocalAddress = d.addrOfFamily(path+".local_address", "local_address", raw.LocalAddress, a.Is4())
	}
	if raw.PasswordFile != "" {
		p.PasswordFile = relativeTo(file, raw.PasswordFile)
		data, err := readChecked(p.PasswordFile, private)
		switch {
		case err != nil:
			d.Errorf(path+".password_file", "password_file %s %v", p.PasswordFile, err)
		case strings.TrimSpace(string(data)) == "" || len(strings.TrimSpace(string(data))) > 80:
			d.Errorf(path+".password_file", "password_file %s: the TCP-MD5 password must be 1-80 characters on one line", p.PasswordFile)
		default:
			p.Password = strings.TrimSpace(string(data))
		}
	}
	p.HoldTime = d.durationIn(path+".hold_time", "hold_time", string(raw.HoldTime), 9*time.Second, 3*time.Second, 65535*time.Second)
	p.Keepalive = d.durationIn(path+".keepalive", "keepalive", string(raw.Keepalive), p.HoldTime/3, time.Second, p.HoldTime/3)
	p.ConnectRetry = d.durationIn(path+".connect_retry", "connect_retry", string(raw.ConnectRetry), 2*time.Second, time.Second, time.Hour)
	if bf := raw.BFD; bf != nil {
		p.BFD = bf.Enabled == nil || *bf.Enabled
		p.BFDInterval = d.durationIn(path+".bfd.interval", "bfd interval", string(bf.Interval), DefaultBFDInterval, 10*time.Millisecond, 10*time.Second)
		if bf.Multiplier != nil {
			p.BFDMultiplier = *bf.Multiplier
		}
	}
	if raw.MaxPrefixes != nil {
		p.MaxPrefixes = uint32(*raw.MaxPrefixes)
	}
	for j, f := range raw.Families {
		fam := route.Family(f)
		if fam != route.IPv4Unicast && fam != route.IPv6Unicast {
			d.Errorf(fmt.Sprintf("%s.families[%d]", path, j), "family %q is not one of ipv4-unicast, ipv6-unicast", f)
			continue
		}
		p.Families = append(p.Families, fam)
	}
	return p, true
}

// listenAddresses validates bgp.listen_addresses: this director's own
// unicast addresses, each once (an unspecified one would listen on every
// address, which leaving the key out and setting listen_port does).
func (d *doc) listenAddresses(raw []string) []netip.Addr {
	var out []netip.Addr
	for i, s := range raw {
		path := fmt.Sprintf("$.bgp.listen_addresses[%d]", i)
		a, err := netip.ParseAddr(s)
		switch {
		case err != nil || a.Zone() != "":
			d.Errorf(path, "listen address %q is not an IP address of this director", s)
		case a.IsUnspecified() || a.IsMulticast():
			d.Errorf(path, "listen address %s is not a unicast address of this director: name the addresses the routers connect to", a)
		case slices.Contains(out, a.Unmap()):
			d.Errorf(path, "listen address %s is listed twice", a)
		default:
			out = append(out, a.Unmap())
		}
	}
	return out
}

// announce validates path attributes.
func (d *doc) announce(path string, raw *rawAnnounce) Announce {
	var a Announce
	for i, s := range raw.Communities {
		c, err := route.ParseCommunity(s)
		if err != nil {
			d.Errorf(fmt.Sprintf("%s.communities[%d]", path, i), "%v", err)
			continue
		}
		a.Communities = append(a.Communities, c)
	}
	for i, s := range raw.LargeCommunities {
		c, err := route.ParseLargeCommunity(s)
		if err != nil {
			d.Errorf(fmt.Sprintf("%s.large_communities[%d]", path, i), "%v", err)
			continue
		}
		a.LargeCommunities = append(a.LargeCommunities, c)
	}
	if raw.LocalPref != nil {
		a.LocalPref = uint32(*raw.LocalPref)
	}
	if raw.MED != nil {
		m := uint32(*raw.MED)
		a.MED = &m
	}
	if raw.ASPathPrepend != nil {
		a.ASPathPrepend = *raw.ASPathPrepend
	}
	return a
}

// addrOfFamily parses an optional IP address of one family (v4 or not).
func (d *doc) addrOfFamily(path, key, raw string, v4 bool) netip.Addr {
	if raw == "" {
		return netip.Addr{}
	}
	a, err := netip.ParseAddr(raw)
	if err != nil || a.Is4() != v4 {
		fam := "IPv6"
		if v4 {
			fam = "IPv4"
		}
		d.Errorf(path, "%s %q is not an %s address", key, raw, fam)
		return netip.Addr{}
	}
	return a
}

// durationIn parses an optional duration within [lo, hi].
// restartTime validates bgp.graceful_restart.restart_time: whole seconds,
// as the capability carries it.
func (d *doc) restartTime(raw string) time.Duration {
	const path = "$.bgp.graceful_restart.restart_time"
	if raw == "" {
		return DefaultRestartTime
	}
	v, err := time.ParseDuration(raw)
	if err != nil || v < minRestartTime || v > MaxRestartTime || v%time.Second != 0 {
		d.Errorf(path, "restart_time %q is not a whole number of seconds from 5s to 4095s (the routers keep the paths this long)", raw)
		return DefaultRestartTime
	}
	return v
}

func (d *doc) durationIn(path, key, raw string, def, lo, hi time.Duration) time.Duration {
	if raw == "" {
		return def
	}
	v, err := time.ParseDuration(raw)
	if err != nil || v < lo || v > hi {
		d.Errorf(path, "%s %q is not a duration from %s to %s", key, raw, lo, hi)
		return def
	}
	return v
}
