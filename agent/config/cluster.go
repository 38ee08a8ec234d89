package config

import (
	"crypto/ed25519"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/lvsd/lvsd/agent/config/yamldoc"
	"github.com/lvsd/lvsd/cluster/settings"
	"github.com/lvsd/lvsd/ipvs/spec"
)

// ClusterMode says how a cluster spreads its VIPs over the directors.
type ClusterMode string

// Cluster modes.
const (
	// ModeActiveStandby: the live director with the highest priority holds
	// every VIP; the others stand by.
	ModeActiveStandby ClusterMode = "active-standby"
	// ModeActiveActive: each VIP is held by the live director ranked first
	// for it (sha256 of node and VIP, as MetalLB ranks), so VIPs spread.
	ModeActiveActive ClusterMode = "active-active"
	// ModeECMP: every director holds every VIP and announces it over BGP;
	// the routers spread the flows over the directors (docs/ecmp.md).
	ModeECMP ClusterMode = "ecmp"
)

// Cluster is the validated `cluster:` block of a director's agent file.
type Cluster struct {
	// Bind is the host:port memberlist listens on (UDP and TCP); an empty
	// host (bind unset) is the director's own address on its interface,
	// which the director resolves at start.
	Bind string
	// Advertise is the host:port the other directors reach this one at;
	// "" lets memberlist derive it from Bind.
	Advertise string
	// Peers are the host:port of the directors to join and re-join; this
	// director may be listed too (one list for every director).
	Peers []string
	// KeyFile holds the cluster keys, one base64 key per line; Keys is its
	// content. The first key encrypts, every key decrypts (key rotation).
	KeyFile string
	Keys    [][]byte
	// Insecure turns encryption and authentication off. Only allowed
	// without KeyFile; lvsd warns at every start.
	Insecure bool
	// IdentityFile is this director's private key (PEM PKCS#8 Ed25519, as
	// `lvsd keygen` writes it); Identity is its content, nil when the file
	// does not exist. The director signs its heartbeats and relay messages
	// with it.
	IdentityFile string
	Identity     ed25519.PrivateKey
	// Directors lists every director's public keys by node name (more
	// than one while a key is rotated). nil (not configured): any holder
	// of the cluster key is believed, whatever name it gives. Set: only
	// messages signed by a key listed under the name they carry count.
	Directors map[string][]ed25519.PublicKey
	// Label separates clusters sharing a network: messages with another
	// label are dropped.
	Label    string
	Mode     ClusterMode
	Priority int  // active-standby: the highest live one holds the VIPs
	Preempt  bool // a better director takes VIPs back from a live holder
	// Quorum is how many directors (this one included) a director must see
	// to hold any VIP. 0 means the default: a majority of Peers plus this
	// director when there are three or more, else 1.
	Quorum int
	// HeartbeatInterval is how often each director tells the others it is
	// alive and which VIPs it holds; FailureTimeout is the silence after
	// which a director counts as failed.
	HeartbeatInterval time.Duration
	FailureTimeout    time.Duration
	// RejoinInterval is how often Peers not in the membership are joined
	// again, so a healed partition merges.
	RejoinInterval time.Duration
	// AddressLifetime is the kernel lifetime of VIP addresses, renewed while
	// lvsd runs: a killed agent's VIPs vanish after at most this long.
	AddressLifetime time.Duration
	// Nice is the scheduling priority lvsd gives itself in a cluster, so its
	// heartbeats stay on time on a busy host (keepalived's vrrp_priority).
	Nice int
	// ConnSync carries IPVS connection state to the other directors.
	ConnSync ConnSync
	// ConfigSync distributes the services directory's files through the
	// cluster (docs/cluster.md, "Configuration sync"); ConfigSources are
	// the directors that may publish.
	ConfigSync    bool
	ConfigSources []string
	// AllowFrom are the sources the cluster port admits (allow_from); nil:
	// the default, Admitted.
	AllowFrom []netip.Prefix
	// Admitted is the default allow set, found on the host, not in the
	// file: the peers' addresses and the on-link prefix of the bind
	// address. The director fills it in when it loads the agent file
	// (cluster.DefaultSources); without it (lvsd check) the peers given as
	// addresses stand in.
	Admitted []netip.Prefix
	// RateLimit is how many packets a second one source may send to the
	// cluster port before the rest is dropped; 0: no limit.
	RateLimit uint32
	// VRRP is the virtual router of mode vrrp (vrrp.go).
	VRRP         VRRP
	unusedInVRRP []string
	// CoordinatedChanges: under ecmp, changed services are put in force by
	// all directors together (coordinated.go).
	CoordinatedChanges CoordinatedChanges
}

// Sources are the sources the cluster port admits: AllowFrom, else the
// Admitted found on the host, else the peers given as addresses.
func (c *Cluster) Sources() []netip.Prefix {
	switch {
	case c.AllowFrom != nil:
		return c.AllowFrom
	case c.Admitted != nil:
		return c.Admitted
	}
	var out []netip.Prefix
	for _, p := range c.Peers {
		if ap, err := netip.ParseAddrPort(p); err == nil {
			out = append(out, netip.PrefixFrom(ap.Addr().Unmap(), ap.Addr().Unmap().BitLen()))
		}
	}
	return out
}

// Port is the cluster port, UDP and TCP: Bind's, else the default.
func (c *Cluster) Port() uint16 {
	_, p, _ := net.SplitHostPort(c.Bind)
	if n, err := strconv.Atoi(p); err == nil && n > 0 && n < 65536 {
		return uint16(n)
	}
	return DefaultClusterPort
}

// ConnSync is the `cluster.conn_sync` block: the kernel's sync daemons run
// on lo (a master sending to Port, a backup reading Port+1) and lvsd relays
// their datagrams over the encrypted cluster.
type ConnSync struct {
	Enabled bool
	Port    uint16
	// ResyncInterval is how often the relay sends its peers a summary of
	// what it sent, from which they find lost messages and ask for their
	// connections again (the kernel never re-sends idle connections;
	// cluster messages are best effort); the whole cache is replayed only
	// to a member that joins or lost more than can be sent again.
	ResyncInterval time.Duration
	// PeerConntrackShare is the share of nf_conntrack_max, in percent,
	// that the conntrack entries a director creates for the other
	// directors' FULLNAT connections under ECMP may take together
	// (agent/peerbudget.go): a flood through the others must not fill
	// this director's table.
	PeerConntrackShare int
}

// DefaultPeerConntrackShare is conn_sync.peer_conntrack_share's default:
// a quarter of the table for the other directors' connections, the rest
// for this director's own flows.
const DefaultPeerConntrackShare = 25

// Defaults and bounds of the cluster block.
const (
	DefaultClusterPort       = settings.DefaultPort
	DefaultClusterLabel      = "lvsd"
	DefaultClusterPriority   = 100
	DefaultHeartbeatInterval = settings.DefaultHeartbeatInterval
	DefaultFailureTimeout    = settings.DefaultFailureTimeout
	// Under ECMP the routers' BFD moves the traffic and the cluster's own
	// failure detection only picks whom connection sync sends to: slower
	// heartbeats cost a quarter as much (packets, encryption, memberlist's
	// 64 KB buffer per packet received) and ride out a busy host.
	DefaultECMPHeartbeatInterval = 200 * time.Millisecond
	DefaultECMPFailureTimeout    = time.Second
	DefaultRejoinInterval        = settings.DefaultRejoinInterval
	DefaultAddressLifetime       = 10 * time.Second
	DefaultClusterNice           = -10
	DefaultConnSyncPort          = spec.DefaultSyncPort
	DefaultResyncInterval        = settings.DefaultResyncInterval
	// DefaultClusterRateLimit is packets per second per source: heartbeats
	// are 20 a second per director, connection sync thousands (replays are
	// paced at 4,000 messages a second, live sync follows the traffic).
	DefaultClusterRateLimit = 20000
	DefaultIdentityFile     = "/etc/lvsd/identity.key"
	maxClusterLabel         = 64
	maxNodeName             = 128 // the cluster's bound on a name in its messages
)

type rawCluster struct {
	Bind              string            `yaml:"bind"`
	Advertise         string            `yaml:"advertise"`
	Peers             []string          `yaml:"peers"`
	KeyFile           string            `yaml:"key_file"`
	IdentityFile      string            `yaml:"identity_file"`
	Directors         map[string]string `yaml:"directors"`
	Insecure          bool              `yaml:"insecure"`
	Label             *string           `yaml:"label"`
	Mode              string            `yaml:"mode"`
	Priority          *int              `yaml:"priority" range:"1-255"`
	Preempt           *bool             `yaml:"preempt"`
	Quorum            *int              `yaml:"quorum" range:"1-1000"`
	HeartbeatInterval yamldoc.Text      `yaml:"heartbeat_interval"`
	FailureTimeout    yamldoc.Text      `yaml:"failure_timeout"`
	RejoinInterval    yamldoc.Text      `yaml:"rejoin_interval"`
	AddressLifetime   yamldoc.Text      `yaml:"address_lifetime"`
	Nice              *int              `yaml:"nice" range:"-20-19"`
	ConnSync          *rawConnSync      `yaml:"conn_sync"`
	ConfigSync        bool              `yaml:"config_sync"`
	ConfigSources     []string          `yaml:"config_sources"`
	AllowFrom         []string          `yaml:"allow_from"`
	RateLimit         *int              `yaml:"rate_limit" range:"0-10000000"`
	VRRP              *rawVRRP          `yaml:"vrrp"`
	Coordinated       *rawCoordinated   `yaml:"coordinated_changes"`
}

type rawConnSync struct {
	Enabled            *bool        `yaml:"enabled"`
	Port               *int         `yaml:"port" range:"1-65535"`
	ResyncInterval     yamldoc.Text `yaml:"resync_interval"`
	PeerConntrackShare *int         `yaml:"peer_conntrack_share" range:"1-100"`
}

// cluster validates the cluster block of the agent file at file; nil
// means the director runs alone and holds every VIP.
func (d *doc) cluster(role Role, raw *rawCluster, file, node string) *Cluster {
	if raw == nil {
		return nil
	}
	if role != RoleDirector {
		d.Errorf("$.cluster", "cluster is only for role director (role is %s)", role)
		return nil
	}
	mode := ClusterMode(orDefault(raw.Mode, string(ModeActiveStandby)))
	heartbeat, failure := DefaultHeartbeatInterval, DefaultFailureTimeout
	if mode == ModeECMP {
		heartbeat, failure = DefaultECMPHeartbeatInterval, DefaultECMPFailureTimeout
	}
	c := &Cluster{
		Mode:            mode,
		Label:           DefaultClusterLabel,
		Priority:        DefaultClusterPriority,
		Preempt:         true,
		Insecure:        raw.Insecure,
		FailureTimeout:  d.clusterDuration("failure_timeout", string(raw.FailureTimeout), failure, 30*time.Millisecond, time.Minute),
		RejoinInterval:  d.clusterDuration("rejoin_interval", string(raw.RejoinInterval), DefaultRejoinInterval, time.Second, 10*time.Minute),
		AddressLifetime: d.clusterDuration("address_lifetime", string(raw.AddressLifetime), DefaultAddressLifetime, 2*time.Second, 24*time.Hour),
	}
	if mode == ModeECMP && raw.HeartbeatInterval == "" {
		// A shorter failure_timeout asked for keeps 5 heartbeats in it.
		heartbeat = max(min(heartbeat, c.FailureTimeout/5), 10*time.Millisecond)
	}
	c.HeartbeatInterval = d.clusterDuration("heartbeat_interval", string(raw.HeartbeatInterval), heartbeat, 10*time.Millisecond, time.Second)
	c.Nice = DefaultClusterNice
	if raw.Nice != nil {
		c.Nice = *raw.Nice // -20-19: its range tag
	}
	d.clusterAddresses(c, raw)
	d.clusterSources(c, raw)
	if mode == ModeVRRP {
		c.unusedInVRRP = vrrpUnused(raw) // VRRP has no key: keepalived's VRRPv3 authenticates nothing
	} else {
		d.clusterKey(c, raw, file)
	}
	d.clusterIdentity(c, raw, file, node)
	if mode != ModeVRRP { // vrrp refuses config_sync as a whole
		d.clusterConfigSync(c, raw)
	}
	d.clusterRanking(c, raw)
	c.ConnSync = d.connSync(raw.ConnSync)
	c.CoordinatedChanges = d.coordinatedChanges(mode, raw.Coordinated)
	if c.FailureTimeout < 3*c.HeartbeatInterval {
		d.Errorf("$.cluster.failure_timeout", "failure_timeout %s is shorter than 3 heartbeat intervals (%s): one lost heartbeat would count as a failure",
			c.FailureTimeout, 3*c.HeartbeatInterval)
	}
	return c
}

// clusterAddresses sets where c listens, what it advertises and its peers.
func (d *doc) clusterAddresses(c *Cluster, raw *rawCluster) {
	port := DefaultClusterPort
	// Unset: the director's own address on its interface, resolved at
	// start (an empty host here); never all addresses, which would serve the
	// cluster port on every VIP to the clients.
	c.Bind = net.JoinHostPort("", strconv.Itoa(port))
	if raw.Bind != "" {
		if host, p, ok := hostPort(raw.Bind, port, true); ok {
			c.Bind, port = net.JoinHostPort(host, strconv.Itoa(p)), p
		} else {
			d.Errorf("$.cluster.bind", "bind %q is not an IP address with an optional port, like 10.0.0.2, 10.0.0.2:7946 or [fd00::2]:7946", raw.Bind)
		}
	}
	if raw.Advertise != "" {
		if host, p, ok := hostPort(raw.Advertise, port, true); ok && host != "" && host != "0.0.0.0" && host != "::" {
			c.Advertise = net.JoinHostPort(host, strconv.Itoa(p))
		} else {
			d.Errorf("$.cluster.advertise", "advertise %q is not an IP address (with an optional port) the other directors can reach", raw.Advertise)
		}
	}
	for i, p := range raw.Peers {
		host, n, ok := hostPort(p, port, false)
		switch {
		case !ok:
			d.Errorf(fmt.Sprintf("$.cluster.peers[%d]", i), "peer %q is not a host with an optional port, like 10.0.0.3, 10.0.0.3:7946 or [fd00::3]:7946", p)
		case slices.Contains(c.Peers, net.JoinHostPort(host, strconv.Itoa(n))):
			d.Errorf(fmt.Sprintf("$.cluster.peers[%d]", i), "peer %s is listed twice", p)
		default:
			c.Peers = append(c.Peers, net.JoinHostPort(host, strconv.Itoa(n)))
		}
	}
}

// clusterSources sets which sources the cluster port admits, and at what
// rate.
func (d *doc) clusterSources(c *Cluster, raw *rawCluster) {
	c.RateLimit = DefaultClusterRateLimit
	if raw.RateLimit != nil {
		c.RateLimit = uint32(*raw.RateLimit) // 0-10000000: its range tag
	}
	if raw.AllowFrom == nil {
		return
	}
	c.AllowFrom = []netip.Prefix{}
	for i, s := range raw.AllowFrom {
		path := fmt.Sprintf("$.cluster.allow_from[%d]", i)
		p, err := netip.ParsePrefix(s)
		if err != nil {
			a, aerr := netip.ParseAddr(s)
			if aerr != nil || a.Zone() != "" {
				d.Errorf(path, "allow_from %q is not an address or a prefix, like 10.0.0.0/24, 10.0.0.3 or fd00::/64", s)
				continue
			}
			p = netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen())
		}
		if p.Masked() != p {
			d.Errorf(path, "allow_from %s has host bits set (did you mean %s?)", s, p.Masked())
			continue
		}
		c.AllowFrom = append(c.AllowFrom, p)
	}
	if len(raw.AllowFrom) == 0 {
		d.Errorf("$.cluster.allow_from", "allow_from is empty: no director could reach this one (leave it out for the default: the peers and the bind address's subnet)")
	}
}

// Warnings are what is allowed but unwise in a, for `lvsd check` and the
// log at start.
func (a *Agent) Warnings() []string {
	var out []string
	if c := a.Cluster; c != nil && c.Mode == ModeVRRP {
		out = append(out, c.vrrpWarnings()...)
	} else if c != nil {
		if host, _, _ := net.SplitHostPort(c.Bind); host == "" {
			out = append(out, fmt.Sprintf("cluster.bind is unset: the cluster port listens on this director's own address on %s, "+
				"the client-facing interface, where lvsd admits only the peers and that address's subnet; "+
				"set cluster.bind to an address on a network of the directors' own (docs/security.md, \"The cluster port\")", a.Interface))
		}
	}
	return out
}

// clusterKey reads the cluster key, required unless insecure: true.
func (d *doc) clusterKey(c *Cluster, raw *rawCluster, file string) {
	switch {
	case raw.KeyFile != "" && raw.Insecure:
		d.Errorf("$.cluster.insecure", "insecure: true turns encryption off, but a key_file is given: keep one of them")
	case raw.KeyFile != "":
		c.KeyFile = relativeTo(file, raw.KeyFile)
		keys, err := ReadKeyFile(c.KeyFile)
		if err != nil {
			d.Errorf("$.cluster.key_file", "%v", err)
		}
		c.Keys = keys
	case !raw.Insecure:
		d.Errorf("$.cluster", "cluster traffic is encrypted and authenticated: key_file is required (a file with a base64 key of 16, 24 or 32 bytes, e.g. from `openssl rand -base64 32`), or insecure: true to run without (not recommended)")
	}
	if raw.Label != nil {
		c.Label = *raw.Label
		if len(c.Label) > maxClusterLabel || strings.ContainsFunc(c.Label, func(r rune) bool { return r < ' ' || r > '~' }) {
			d.Errorf("$.cluster.label", "label %q is not up to %d printable ASCII characters", c.Label, maxClusterLabel)
		}
	}
}

// clusterRanking sets the mode and how it ranks directors.
func (d *doc) clusterRanking(c *Cluster, raw *rawCluster) {
	switch c.Mode {
	case ModeActiveStandby, ModeActiveActive, ModeECMP, ModeVRRP:
	default:
		d.Errorf("$.cluster.mode", "mode %q is not one of active-standby, active-active, ecmp, vrrp", raw.Mode)
	}
	if raw.Priority != nil {
		c.Priority = *raw.Priority
		if c.Mode == ModeVRRP {
			d.Errorf("$.cluster.priority", "in mode vrrp the priority is vrrp.priority, as in keepalived's vrrp_instance")
		} else if c.Mode != ModeActiveStandby {
			d.Errorf("$.cluster.priority", "priority is for mode active-standby; %s does not rank directors by it", c.Mode)
		}
	}
	if raw.Preempt != nil {
		c.Preempt = *raw.Preempt
	}
	if raw.Quorum != nil {
		c.Quorum = *raw.Quorum
		if c.Quorum < 1 || c.Quorum > len(c.Peers)+1 {
			d.Errorf("$.cluster.quorum", "quorum %d is not in 1-%d (the peers plus this director)", c.Quorum, len(c.Peers)+1)
		}
	}
}

// connSync is the conn_sync block with its defaults (on).
func (d *doc) connSync(raw *rawConnSync) ConnSync {
	c := ConnSync{Enabled: true, Port: DefaultConnSyncPort, ResyncInterval: DefaultResyncInterval, PeerConntrackShare: DefaultPeerConntrackShare}
	if raw == nil {
		return c
	}
	if raw.PeerConntrackShare != nil {
		c.PeerConntrackShare = *raw.PeerConntrackShare
	}
	if raw.Enabled != nil {
		c.Enabled = *raw.Enabled
	}
	if raw.Port != nil {
		// The relay uses the port and the next two (connsync).
		if *raw.Port > 65535-2 {
			d.Errorf("$.cluster.conn_sync.port", "port %d is not in 1-%d (connection sync also uses the next two ports)", *raw.Port, 65535-2)
		} else {
			c.Port = uint16(*raw.Port)
		}
	}
	c.ResyncInterval = d.clusterDuration("conn_sync.resync_interval", string(raw.ResyncInterval), DefaultResyncInterval, time.Second, time.Hour)
	return c
}

// clusterDuration parses the duration key of the cluster block, within
// [lo, hi].
func (d *doc) clusterDuration(key, raw string, def, lo, hi time.Duration) time.Duration {
	if raw == "" {
		return def
	}
	v, err := time.ParseDuration(raw)
	if err != nil || v < lo || v > hi {
		d.Errorf("$.cluster."+key, "%s %q is not a duration from %s to %s", key, raw, lo, hi)
		return def
	}
	return v
}

// hostPort splits "host", "host:port", "[v6]" or "[v6]:port", filling in
// port def. With ipOnly the host must be an IP address (or empty, for
// "every address").
func hostPort(s string, def int, ipOnly bool) (string, int, bool) {
	host, port := s, def
	if h, p, err := net.SplitHostPort(s); err == nil {
		n, err := strconv.Atoi(p)
		if err != nil || n < 1 || n > 65535 {
			return "", 0, false
		}
		host, port = h, n
	} else if strings.HasPrefix(s, "[") != strings.HasSuffix(s, "]") {
		return "", 0, false // "[fd00::3" or "[fd00::3]x"
	}
	host = strings.Trim(host, "[]")
	if ip := net.ParseIP(host); ip != nil {
		return ip.String(), port, true
	}
	if ipOnly {
		return "", port, host == ""
	}
	return host, port, isHostname(host)
}

// isHostname accepts DNS names: letters, digits, '-' and '.' in labels of
// up to 63 characters.
func isHostname(s string) bool {
	if s == "" || len(s) > 253 {
		return false
	}
	for _, l := range strings.Split(strings.TrimSuffix(s, "."), ".") {
		if l == "" || len(l) > 63 || strings.HasPrefix(l, "-") || strings.HasSuffix(l, "-") ||
			strings.Trim(l, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-") != "" {
			return false
		}
	}
	return true
}
