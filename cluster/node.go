package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/lvsd/lvsd/cluster/identity"
	"github.com/lvsd/lvsd/cluster/settings"
)

// Config configures a Node. Zero durations take the defaults below.
type Config struct {
	Name     string // unique in the cluster
	Rules    Rules  // Quorum 0: a majority of Peers plus this node (1 for two directors)
	Priority int    // active-standby
	// Incarnation tells this process from the earlier ones of this
	// director: the peers take a heartbeat of a higher incarnation than
	// the last one they used as a restart at once, a lower one only after
	// the failure timeout (freshness.go). It must grow with every start
	// whatever the clock does; the caller keeps it across restarts. Zero:
	// the start time in Unix nanoseconds, which does not grow if the clock
	// went back.
	Incarnation uint64

	Bind      string   // host:port for memberlist (UDP and TCP)
	Advertise string   // host:port others reach this node at; "" derives it from Bind
	Peers     []string // host:port of the directors to join and re-join
	Label     string
	// Keys encrypt and authenticate all traffic (the first encrypts, all
	// decrypt). Without keys Insecure must be set.
	Keys     [][]byte
	Insecure bool
	// KeyFile is watched: when it changes, LoadKeys is called and the
	// keyring replaced (key rotation without a restart).
	KeyFile  string
	LoadKeys func() ([][]byte, error)
	// Identity signs this director's heartbeats and, with Directors set,
	// says whose heartbeats and connection-sync messages to believe
	// (cluster/identity). nil: unsigned, and every key holder believed.
	Identity *identity.Keys

	HeartbeatInterval time.Duration
	FailureTimeout    time.Duration // silence after which a director counts as failed
	// Rise is how long a director must be heard without a gap before it
	// counts again after a failure (or at first contact), so a flapping
	// link does not move VIPs back and forth.
	Rise time.Duration
	// StartupHold is how long a starting node waits before it may own
	// VIPs, so it has heard who holds what before taking anything.
	StartupHold    time.Duration
	RejoinInterval time.Duration

	// VIPs are the VIPs this director serves at start (usually none: the
	// agent says which with Serve once their data plane is programmed).
	VIPs []netip.Addr
	// Adopt are the VIPs the previous process held when it stopped under a
	// restart hold that lasts until AdoptUntil: held and claimed from the
	// start, whatever the start-up hold (restarthold.go).
	Adopt      []netip.Addr
	AdoptUntil time.Time

	// Reannounce is called (on its own goroutine) for a VIP this node
	// holds when another director that also held it has let go, so the
	// link learns again where the VIP is.
	Reannounce func(netip.Addr)
	Log        *slog.Logger
	// Transport replaces memberlist's UDP/TCP transport (tests).
	Transport memberlist.Transport
}

// Defaults of Config, written down in cluster/settings, which the
// configuration reads without linking memberlist.
const (
	DefaultPort              = settings.DefaultPort // memberlist's, UDP and TCP
	DefaultHeartbeatInterval = settings.DefaultHeartbeatInterval
	DefaultFailureTimeout    = settings.DefaultFailureTimeout
	DefaultRejoinInterval    = settings.DefaultRejoinInterval
	maxNameLen               = 128
)

func (c *Config) setDefaults() error {
	if c.Name == "" || len(c.Name) > maxNameLen {
		return fmt.Errorf("node name %q must have 1-%d bytes", c.Name, maxNameLen)
	}
	if len(c.Keys) == 0 && !c.Insecure {
		return errors.New("no cluster key: encryption and authentication are required unless insecure is set")
	}
	for _, k := range c.Keys {
		if l := len(k); l != 16 && l != 24 && l != 32 {
			return fmt.Errorf("a cluster key has %d bytes, want 16, 24 or 32", l)
		}
	}
	if c.Rules.Mode == "" {
		c.Rules.Mode = ActiveStandby
	}
	if c.HeartbeatInterval <= 0 {
		c.HeartbeatInterval = DefaultHeartbeatInterval
	}
	if c.FailureTimeout <= 0 {
		c.FailureTimeout = DefaultFailureTimeout
	}
	if c.Rise <= 0 {
		c.Rise = c.FailureTimeout
	}
	if c.StartupHold <= 0 {
		c.StartupHold = max(time.Second, 2*c.FailureTimeout+c.Rise)
	}
	if c.RejoinInterval <= 0 {
		c.RejoinInterval = DefaultRejoinInterval
	}
	if c.Bind == "" {
		c.Bind = net.JoinHostPort("0.0.0.0", strconv.Itoa(DefaultPort))
	}
	if c.Log == nil {
		c.Log = slog.Default()
	}
	if c.Incarnation == 0 {
		c.Incarnation = uint64(time.Now().UnixNano())
	}
	return nil
}

// DefaultQuorum is a majority of n directors when there are three or more;
// with one or two it is 1, since a majority of two is both and one
// survivor could never hold a VIP. Two directors behave like VRRP: a
// partition between them makes both hold the VIPs.
func DefaultQuorum(n int) int {
	if n < 3 {
		return 1
	}
	return n/2 + 1
}

// Node is this director's membership in the cluster and its share of the
// VIPs. It implements the agent's VIPOwnership: Holds and Changed.
//
// One goroutine (run) owns the membership state; memberlist's callbacks,
// Holds and the address hooks hand it work through channels or the small
// mutex-guarded fields below.
type Node struct {
	cfg         Config
	log         *slog.Logger
	ml          *memberlist.Memberlist
	keyring     *memberlist.Keyring // nil when insecure
	incarnation uint64
	started     time.Time
	self        map[string]bool // host:port strings that reach this node
	lastCheck   atomic.Int64    // unix nanoseconds of the loop's last liveness check
	leaving     atomic.Bool

	heartbeats     chan received
	poke           chan struct{} // pending fields changed
	reqs           chan func()   // run on the loop goroutine
	joinReq        chan string
	changed        chan struct{}
	votesChanged   chan struct{} // HealthVotesChanged
	configsChanged chan struct{} // PeerConfigsChanged
	cancel         context.CancelFunc
	done           chan struct{}

	mu          sync.Mutex // guards all following fields
	held        map[netip.Addr]bool
	served      []netip.Addr          // set by Serve, not yet seen by the loop; nil: no change
	homes       map[netip.Addr]string // set by ServeHomes, not yet seen by the loop; nil: no change
	addrEvents  map[netip.Addr]bool   // address now present (true) or gone, not yet seen by the loop
	memberEvs   []memberEvent
	peerAddrs   []string // resolved Peers without this node
	lastJoinErr string
	syncPeers   map[string]syncPeer // the directors sync messages go to, by name
	share       *healthShare        // set by ShareHealth, not yet seen by the loop
	config      *ConfigDigest       // set by AdvertiseConfig, not yet seen by the loop
	votes       Votes               // published by the loop (publishVotes)
	configs     PeerConfigs         // published by the loop (publishConfigs)

	sync       atomic.Pointer[SyncReceiver]
	early      earlySync                          // sync messages that came before SetSync
	configSync atomic.Pointer[ConfigSyncReceiver] // SetConfigSync

	auth          authority    // who may send connection records of which VIP (authority.go)
	port          portStats    // what the cluster port refused
	versionWarned atomic.Int64 // unix nanoseconds of the last warning about a heartbeat of another version
	refused       refusals     // heartbeats refused before the guard (admit.go)

	st loopState // owned by the loop goroutine
}

type received struct {
	hb heartbeat
	at time.Time
}

// Start creates the memberlist (binding its sockets), starts the
// heartbeat loop and joins the peers in the background: a director must be
// able to start alone. It returns once the node runs; Leave stops it.
func Start(cfg Config) (*Node, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	n := &Node{
		cfg:            cfg,
		log:            cfg.Log,
		incarnation:    cfg.Incarnation,
		started:        time.Now(),
		heartbeats:     make(chan received, 256),
		poke:           make(chan struct{}, 1),
		reqs:           make(chan func()),
		joinReq:        make(chan string, 16),
		changed:        make(chan struct{}, 1),
		votesChanged:   make(chan struct{}, 1),
		configsChanged: make(chan struct{}, 1),
		done:           make(chan struct{}),
		held:           map[netip.Addr]bool{},
		addrEvents:     map[netip.Addr]bool{},
	}
	n.st.init(n)
	n.st.adopt(cfg.Adopt, cfg.AdoptUntil)
	n.served = unmapped(cfg.VIPs)
	mc := n.memberlistConfig()
	var own *transport
	if bind, err := netip.ParseAddrPort(cfg.Bind); mc.Transport == nil && err == nil && !bind.Addr().IsUnspecified() {
		// One address (lvsd's default): lvsd's transport. A wildcard bind
		// keeps memberlist's, which finds an address to advertise.
		if own, err = newTransport(bind, n.log, &n.port); err != nil {
			return nil, err
		}
		mc.Transport = own
	}
	ml, err := memberlist.Create(mc)
	if err != nil {
		if own != nil {
			_ = own.Shutdown()
		}
		return nil, fmt.Errorf("cluster: starting memberlist on %s: %w", cfg.Bind, err)
	}
	n.ml = ml
	n.self = selfAddresses(ml.LocalNode().Address(), cfg.Bind)
	if n.cfg.Rules.Quorum == 0 {
		others := 0
		for _, p := range cfg.Peers {
			if !n.self[p] {
				others++
			}
		}
		n.cfg.Rules.Quorum = DefaultQuorum(others + 1)
	}
	ctx, cancel := context.WithCancel(context.Background())
	n.cancel = cancel
	go n.run(ctx)
	go n.rejoinLoop(ctx)
	n.log.Info("cluster node started", "node", cfg.Name, "address", ml.LocalNode().Address(),
		"mode", string(cfg.Rules.Mode), "priority", cfg.Priority, "preempt", cfg.Rules.Preempt,
		"quorum", n.cfg.Rules.Quorum, "peers", len(cfg.Peers), "encrypted", !cfg.Insecure,
		"signed", cfg.Identity.Signs(), "identities_enforced", cfg.Identity.Enforced(),
		"heartbeat", cfg.HeartbeatInterval.String(), "failure_timeout", cfg.FailureTimeout.String())
	if cfg.Insecure {
		n.log.Warn("cluster traffic is neither encrypted nor authenticated (insecure: true): anyone who can reach the cluster port can take the VIPs")
	}
	if n.cfg.Rules.Quorum == 1 && len(cfg.Peers) > 0 {
		n.log.Info("quorum is 1: a partition between directors makes each side hold the VIPs (set quorum with three or more directors)")
	}
	return n, nil
}

// selfAddresses returns the host:port strings that mean this node: its
// memberlist address and every local IP with its bind port.
func selfAddresses(advertise, bind string) map[string]bool {
	out := map[string]bool{advertise: true}
	_, port, err := net.SplitHostPort(bind)
	if port == "0" { // picked by the kernel: memberlist advertises it
		_, port, err = net.SplitHostPort(advertise)
	}
	if err != nil {
		return out
	}
	addrs, _ := net.InterfaceAddrs()
	for _, a := range addrs {
		if ipn, ok := a.(*net.IPNet); ok {
			out[net.JoinHostPort(ipn.IP.String(), port)] = true
		}
	}
	return out
}

// Address is the host:port the other directors reach this node at.
func (n *Node) Address() string { return n.ml.LocalNode().Address() }

// Serve replaces the VIPs this node decides about: the VIPs this director
// can serve (the agent calls it once their data plane is programmed, and
// again when the configuration changes them). A VIP left out is released.
// Safe to call from any goroutine.
func (n *Node) Serve(vips []netip.Addr) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.served = unmapped(vips)
	if n.served == nil {
		n.served = []netip.Addr{}
	}
	n.signal()
}

// ServeHomes sets, under ECMP, which of the served VIPs are a director's
// own addresses (Rules.Homes): one director holds each at a time, its home
// while it can. Safe to call from any goroutine.
func (n *Node) ServeHomes(homes map[netip.Addr]string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.homes = make(map[netip.Addr]string, len(homes))
	for a, h := range homes {
		n.homes[a.Unmap()] = h
	}
	n.signal()
}

func unmapped(vips []netip.Addr) []netip.Addr {
	if vips == nil {
		return nil
	}
	out := make([]netip.Addr, len(vips))
	for i, v := range vips {
		out[i] = v.Unmap()
	}
	return out
}

// Holds reports whether this node holds vip now.
func (n *Node) Holds(vip netip.Addr) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.held[vip.Unmap()]
}

// Changed delivers a value whenever Holds may answer differently.
func (n *Node) Changed() <-chan struct{} { return n.changed }

// Held returns the VIPs this node holds now, sorted.
func (n *Node) Held() []netip.Addr {
	n.mu.Lock()
	defer n.mu.Unlock()
	out := slices.Collect(maps.Keys(n.held))
	slices.SortFunc(out, netip.Addr.Compare)
	return out
}

// AddressChanged tells the node that a VIP address was put on (present) or
// removed from its interface. A node claims a VIP in its heartbeats while it
// wants it or the address is still there, so a peer takes a VIP over only
// once it is really gone here. Safe to call from any goroutine.
func (n *Node) AddressChanged(addr netip.Addr, present bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.addrEvents[addr.Unmap()] = present
	n.signal()
}

// Healthy reports whether the node's loop is running and has checked its
// peers recently; VIP addresses are renewed only while it is (a wedged
// node must let its VIPs expire, since its peers already took them).
func (n *Node) Healthy() bool {
	select {
	case <-n.done:
		return false
	default:
	}
	return time.Since(n.st.lastCheckAt()) < 4*n.cfg.FailureTimeout
}

// signal wakes the loop; n.mu is held.
func (n *Node) signal() {
	select {
	case n.poke <- struct{}{}:
	default:
	}
}

// do runs f on the loop goroutine and waits for it, or fails when ctx ends
// or the loop has stopped.
func (n *Node) do(ctx context.Context, f func()) error {
	finished := make(chan struct{})
	select {
	case n.reqs <- func() { f(); close(finished) }:
	case <-n.done:
		return errors.New("cluster node stopped")
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case <-finished:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Leave hands this node's VIPs over and leaves the cluster: it stops
// wanting VIPs, calls release (which removes the addresses; the agent has
// stopped by then), tells the peers it is leaving so they take over at once
// instead of after the failure timeout, and shuts memberlist down. Under a
// restart hold (HoldForRestart) it keeps the VIPs instead: no release, and
// its last heartbeats repeat the hold.
func (n *Node) Leave(ctx context.Context, release func(context.Context) error) error {
	if !n.leaving.CompareAndSwap(false, true) {
		return nil
	}
	var errs []error
	var holdLeft time.Duration
	if err := n.do(ctx, func() {
		if holdLeft = n.st.restartHoldLeft(time.Now()); holdLeft == 0 {
			n.st.startLeaving()
		}
	}); err != nil {
		errs = append(errs, err)
	}
	restarting := holdLeft > 0
	if restarting {
		n.log.Info("stopping for a restart: keeping the VIPs", "hold_left", holdLeft.Round(time.Millisecond).String())
	}
	if release != nil && !restarting {
		errs = append(errs, release(ctx))
	}
	// Let the loop see the addresses go (its heartbeats stop claiming them)
	// before it stops.
	errs = append(errs, n.do(ctx, func() {}))
	n.cancel()
	<-n.done
	if restarting {
		n.st.sendRestarting()
	} else {
		n.st.sendLeaving()
	}
	// Peers already know from the heartbeat; the gossip of memberlist's
	// own leave message may time out when they are unreachable.
	if err := n.ml.Leave(time.Second); err != nil {
		n.log.Debug("memberlist leave", "err", err)
	}
	errs = append(errs, n.ml.Shutdown())
	n.log.Info("left the cluster")
	return errors.Join(errs...)
}

// portStats count what the cluster port refused, for the view.
type portStats struct {
	refusedPackets atomic.Uint64 // failed authentication (memberlist's decryption or label)
	refusedStreams atomic.Uint64 // TCP streams closed before memberlist read them: too many, silent, or too long
}
