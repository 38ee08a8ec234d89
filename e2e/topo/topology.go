package topo

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
)

// Limits of the address plan (see the package documentation).
const (
	maxDirectors   = 8                   // 10.0.0.2 .. 10.0.0.9
	maxRealServers = 89                  // 10.0.0.11 .. 10.0.0.99
	sourcesIn24    = 155                 // 10.0.0.100 .. 10.0.0.254
	maxSources     = sourcesIn24 + 65534 // the rest: 10.1.0.1 .. 10.1.255.254
)

// Option configures New.
type Option func(*config)

type config struct {
	sources, directors, realServers int
	gateways                        []netip.Addr
	router                          bool
}

// WithClientSources sets how many extra source addresses the client gets in
// each family (default 32).
func WithClientSources(n int) Option { return func(c *config) { c.sources = n } }

// WithDirectors sets the number of directors (default 1): "director",
// "director2", "director3", …
func WithDirectors(n int) Option { return func(c *config) { c.directors = n } }

// WithRealServers sets the number of real servers (default 2): "rs1", "rs2", …
func WithRealServers(n int) Option { return func(c *config) { c.realServers = n } }

// WithRouter adds the host "router" (10.0.0.10, fd00::10) for ECMP tests:
// it forwards (IPv4 and IPv6) with the L4 multipath hash
// (fib_multipath_hash_policy=1) and sends no ICMP redirects, and the client
// accepts none, since client, router and directors share one link: a
// redirect would send the client's flows straight to one director. Run FRR
// in it with StartFRR; route the VIPs via it on the client with
// Client().AddRoute(vip, Router().V4).
func WithRouter() Option { return func(c *config) { c.router = true } }

// WithDefaultGateway gives every host except the gateway itself a default
// route via gw (one address per family). Default: no default route.
func WithDefaultGateway(gw ...netip.Addr) Option {
	return func(c *config) { c.gateways = append(c.gateways, gw...) }
}

// Topology is a set of hosts (network namespaces) on one bridge. Its methods
// are safe for concurrent use.
type Topology struct {
	// Prefix starts the name of every namespace and link of this topology,
	// e.g. "lt123-1"; it is also the bridge's name.
	Prefix string
	// Bridge is the name of the bridge in the original namespace.
	Bridge string

	cfg    config
	root   *netlink.Handle // netlink socket in the original namespace
	group  uint32          // link group of the bridge and its ports
	bridge netlink.Link

	mu           sync.Mutex
	closed       bool
	segments     int              // AddSegment calls, to name their bridges
	extraBridges []netlink.Link   // the segments' bridges, for cleanup
	all          []*Host          // every host begun, for cleanup; numbers the ports
	hosts        []*Host          // complete hosts in creation order
	byName       map[string]*Host // complete hosts by ID and by netns name
}

// topoSeq numbers the topologies of this process.
var topoSeq atomic.Int32

// New creates a topology in the current process's original namespace and
// registers its removal with t.Cleanup (which also runs when the test
// failed). It skips the test when not running as root.
func New(t testing.TB, opts ...Option) *Topology {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("topo: needs root (network namespaces)")
	}
	tp, err := Build(opts...)
	if err != nil {
		t.Fatalf("topo: %v", err)
	}
	t.Cleanup(func() {
		if err := tp.Close(); err != nil {
			t.Errorf("topo: cleanup: %v", err)
		}
	})
	return tp
}

// Build creates a topology outside a test (e.g. for the demo); the caller
// must Close it. On error, whatever was built is already removed.
func Build(opts ...Option) (*Topology, error) {
	cfg := config{sources: 32, directors: 1, realServers: 2}
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.sources < 0 || cfg.sources > maxSources || cfg.directors < 1 || cfg.directors > maxDirectors ||
		cfg.realServers < 0 || cfg.realServers > maxRealServers {
		return nil, fmt.Errorf("out of range: %d sources (max %d), %d directors (1..%d), %d real servers (max %d)",
			cfg.sources, maxSources, cfg.directors, maxDirectors, cfg.realServers, maxRealServers)
	}
	tp := &Topology{cfg: cfg, byName: map[string]*Host{}}
	if err := tp.claim(); err != nil {
		return nil, err
	}
	if err := tp.build(); err != nil {
		return nil, errors.Join(err, tp.Close())
	}
	return tp, nil
}

// Close removes every namespace and link of the topology.
func (tp *Topology) Close() error { return tp.close() }

// claim picks a free prefix. Creating the bridge is the atomic claim:
// another test process whose pid has the same remainder gets EEXIST and
// moves on. Leftover namespaces of a crashed run are skipped too.
func (tp *Topology) claim() error {
	root, err := rootHandle()
	if err != nil {
		return err
	}
	tp.root = root
	for tries := 0; tries < 100; tries++ {
		seq := topoSeq.Add(1)
		prefix := fmt.Sprintf("lt%d-%d", os.Getpid()%1000, seq)
		if old, _ := filepath.Glob("/run/netns/" + prefix + "-*"); len(old) > 0 {
			continue
		}
		// Links of a topology share a link group: deleting the group is one
		// kernel batch (one RCU grace period) instead of ~16 ms per link.
		// The pid (< 2^22) makes the group unique among live processes; the
		// check covers a wrapped seq and leftovers of a dead process.
		tp.group = uint32(os.Getpid())<<10 | uint32(seq&0x3ff)
		if groupInUse(root, tp.group) {
			continue
		}
		la := netlink.NewLinkAttrs()
		la.Name = prefix
		la.Group = tp.group
		la.Flags = net.FlagUp
		off := false
		br := &netlink.Bridge{LinkAttrs: la, MulticastSnooping: &off}
		// Snooping off: with no querier on the bridge, IPv6 ND and IPVS sync
		// multicast must simply be flooded to every port.
		if err := root.LinkAdd(br); err != nil {
			if errors.Is(err, unix.EEXIST) {
				continue
			}
			root.Close()
			return fmt.Errorf("create bridge %s: %w", prefix, err)
		}
		link, err := root.LinkByName(prefix)
		if err != nil {
			_ = root.LinkDel(br)
			root.Close()
			return err
		}
		tp.Prefix, tp.Bridge, tp.bridge = prefix, prefix, link
		return nil
	}
	root.Close()
	return errors.New("no free topology prefix after 100 tries")
}

func rootHandle() (*netlink.Handle, error) {
	if rootNSErr != nil {
		return nil, fmt.Errorf("cannot open the original network namespace: %w", rootNSErr)
	}
	return netlink.NewHandleAt(rootNS, unix.NETLINK_ROUTE)
}

// build creates the standard hosts.
func (tp *Topology) build() error {
	client := []netip.Prefix{pfx4(1), pfx6(1)}
	for i := 0; i < tp.cfg.sources; i++ {
		client = append(client, sourcePrefix(i, false))
	}
	for i := 0; i < tp.cfg.sources; i++ {
		client = append(client, sourcePrefix(i, true))
	}
	type hostDef struct {
		id    string
		addrs []netip.Prefix
	}
	hosts := []hostDef{{"client", client}}
	for i := 1; i <= tp.cfg.directors; i++ {
		hosts = append(hosts, hostDef{directorID(i), []netip.Prefix{pfx4(1 + i), pfx6(1 + i)}})
	}
	for i := 1; i <= tp.cfg.realServers; i++ {
		hosts = append(hosts, hostDef{"rs" + strconv.Itoa(i), []netip.Prefix{pfx4(10 + i), pfx6(10 + i)}})
	}
	if tp.cfg.router {
		hosts = append(hosts, hostDef{"router", []netip.Prefix{pfx4(routerOctet), pfx6(routerOctet)}})
	}
	made := make([]*Host, 0, len(hosts))
	for _, hd := range hosts {
		h, err := tp.addHost(hd.id, hd.addrs)
		if err != nil {
			return err
		}
		made = append(made, h)
	}
	if tp.cfg.router {
		if err := tp.setUpRouting(); err != nil {
			return err
		}
	}
	// One wait for all: the links come up asynchronously, in parallel.
	return waitReady(made...)
}

// routerOctet places the router between the directors and the real servers.
const routerOctet = 10

// Router returns the router of WithRouter; it panics without one.
func (tp *Topology) Router() *Host { return tp.must("router") }

// RouteViaRouter routes prefixes (the VIPs) from the client via the router
// (its address of the prefix's family), as the client of an ECMP test
// reaches them.
func (tp *Topology) RouteViaRouter(prefixes ...netip.Prefix) error {
	router := tp.Router()
	for _, p := range prefixes {
		if err := tp.Client().AddRoute(p, router.Addr(p.Addr().Is6())); err != nil {
			return err
		}
	}
	return nil
}

// setUpRouting sets the sysctls of WithRouter.
func (tp *Topology) setUpRouting() error {
	router, client := tp.Host("router"), tp.Host("client")
	for _, kv := range [][2]string{
		{"net/ipv4/ip_forward", "1"},
		{"net/ipv6/conf/all/forwarding", "1"},
		{"net/ipv4/fib_multipath_hash_policy", "1"},
		{"net/ipv6/fib_multipath_hash_policy", "1"},
		// send_redirects is or-ed over all and the device.
		{"net/ipv4/conf/all/send_redirects", "0"},
		{"net/ipv4/conf/default/send_redirects", "0"},
		{"net/ipv4/conf/" + router.Link + "/send_redirects", "0"},
	} {
		if err := router.Sysctl(kv[0], kv[1]); err != nil {
			return err
		}
	}
	// IPv6 has no switch for sending redirects: the client ignores them.
	for _, key := range []string{"net/ipv4/conf/all/accept_redirects", "net/ipv4/conf/" + client.Link + "/accept_redirects",
		"net/ipv6/conf/all/accept_redirects", "net/ipv6/conf/" + client.Link + "/accept_redirects"} {
		if err := client.Sysctl(key, "0"); err != nil {
			return err
		}
	}
	return nil
}

func directorID(i int) string {
	if i == 1 {
		return "director"
	}
	return "director" + strconv.Itoa(i)
}

// pfx4 is 10.0.0.octet/24.
func pfx4(octet int) netip.Prefix {
	return netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 0, 0, byte(octet)}), 24)
}

// pfx6 is fd00::<octet's decimal digits>/64, the v6 twin of pfx4.
func pfx6(octet int) netip.Prefix {
	return netip.PrefixFrom(netip.MustParseAddr("fd00::"+strconv.Itoa(octet)), 64)
}

// sourcePrefix is the i-th (0-based) extra client source address.
func sourcePrefix(i int, v6 bool) netip.Prefix {
	if i < sourcesIn24 {
		if v6 {
			return pfx6(100 + i)
		}
		return pfx4(100 + i)
	}
	k := i - sourcesIn24 + 1 // from 1: 10.1.0.0 would be the network address
	if v6 {
		// fd01::15:101 is the twin of 10.1.15.101, as in pfx6.
		return netip.PrefixFrom(netip.MustParseAddr(fmt.Sprintf("fd01::%d:%d", k>>8, k&0xff)), 128)
	}
	return netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 1, byte(k >> 8), byte(k)}), 32)
}

// Client sources beyond the /24 are not interface addresses: adding
// thousands of IPv6 addresses one by one is quadratic in the kernel (4096
// took 4 s natively, 30 s under TCG). Instead the client owns these
// prefixes through local routes ("AnyIP": any address in them is local)
// and every other host routes them via the client's primary address, so
// no per-address ARP/ND is needed either.
var extraNets = [2]netip.Prefix{netip.MustParsePrefix("10.1.0.0/16"), netip.MustParsePrefix("fd01::/64")}

// Host returns the host with that ID ("client", "rs1") or netns name, or nil.
func (tp *Topology) Host(name string) *Host {
	tp.mu.Lock()
	defer tp.mu.Unlock()
	return tp.byName[name]
}

// Hosts returns all hosts in creation order.
func (tp *Topology) Hosts() []*Host {
	tp.mu.Lock()
	defer tp.mu.Unlock()
	return append([]*Host(nil), tp.hosts...)
}

// Client returns the client host.
func (tp *Topology) Client() *Host { return tp.must("client") }

// Director returns the i-th director, 1-based: Director(1) is "director",
// Director(2) is "director2". It panics if there is no such host.
func (tp *Topology) Director(i int) *Host { return tp.must(directorID(i)) }

// RS returns the i-th real server, 1-based: RS(1) is "rs1". It panics if
// there is no such host.
func (tp *Topology) RS(i int) *Host { return tp.must("rs" + strconv.Itoa(i)) }

// Directors returns all directors in order.
func (tp *Topology) Directors() []*Host {
	out := make([]*Host, tp.cfg.directors)
	for i := range out {
		out[i] = tp.Director(i + 1)
	}
	return out
}

// RealServers returns all real servers in order.
func (tp *Topology) RealServers() []*Host {
	out := make([]*Host, tp.cfg.realServers)
	for i := range out {
		out[i] = tp.RS(i + 1)
	}
	return out
}

func (tp *Topology) must(id string) *Host {
	h := tp.Host(id)
	if h == nil {
		panic("topo: no host " + id + " in topology " + tp.Prefix)
	}
	return h
}

// ClientSources returns the client's extra source addresses of one family
// (not including its primary 10.0.0.1 / fd00::1).
func (tp *Topology) ClientSources(v6 bool) []netip.Addr {
	out := make([]netip.Addr, tp.cfg.sources)
	for i := range out {
		out[i] = sourcePrefix(i, v6).Addr()
	}
	return out
}

// close removes everything the topology created. Deleting the root side of
// each veth destroys the pair even when sockets (or processes) still pin the
// namespace; the names in /run/netns go away regardless.
func (tp *Topology) close() error {
	tp.mu.Lock()
	hosts := tp.all
	tp.all, tp.hosts, tp.byName, tp.closed = nil, nil, map[string]*Host{}, true
	bridges := append(slices.Clone(tp.extraBridges), tp.bridge)
	tp.mu.Unlock()
	var errs []error
	if tp.bridge != nil {
		// Best effort: links left over are deleted one by one below.
		_ = deleteGroup(tp.group)
	}
	for i := len(hosts) - 1; i >= 0; i-- {
		errs = append(errs, hosts[i].destroy(tp.root))
	}
	for _, br := range bridges {
		if br == nil {
			continue
		}
		if err := tp.root.LinkDel(br); err != nil && !isNotFound(err) {
			errs = append(errs, fmt.Errorf("delete bridge %s: %w", br.Attrs().Name, err))
		}
	}
	if tp.root != nil {
		tp.root.Close()
	}
	return errors.Join(errs...)
}

func isNotFound(err error) bool {
	var lnf netlink.LinkNotFoundError
	return errors.As(err, &lnf) || errors.Is(err, unix.ENODEV) || errors.Is(err, os.ErrNotExist)
}

// groupInUse reports whether a link of the original namespace is in group
// (or the links cannot be listed).
func groupInUse(root *netlink.Handle, group uint32) bool {
	links, err := root.LinkList()
	if err != nil {
		return true
	}
	for _, l := range links {
		if l.Attrs().Group == group {
			return true
		}
	}
	return false
}

// deleteGroup deletes every link of the original namespace in the group.
func deleteGroup(group uint32) error {
	return inNS(rootNS, func() error {
		req := nl.NewNetlinkRequest(unix.RTM_DELLINK, unix.NLM_F_ACK)
		req.AddData(nl.NewIfInfomsg(unix.AF_UNSPEC))
		req.AddData(nl.NewRtAttr(unix.IFLA_GROUP, nl.Uint32Attr(group)))
		_, err := req.Execute(unix.NETLINK_ROUTE, 0)
		return err
	})
}
