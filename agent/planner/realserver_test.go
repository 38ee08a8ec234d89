package planner

import (
	"maps"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/lvsd/lvsd/agent/config"
	arp "github.com/lvsd/lvsd/arp/spec"
)

func TestBuild(t *testing.T) {
	rs := config.RealServer{ARPInterfaces: []string{"eth0", "bond0.7", "eth0", "all", "lo"}}
	vips := []netip.Addr{
		netip.MustParseAddr("2001:db8::10"), netip.MustParseAddr("203.0.113.10"),
		netip.MustParseAddr("::ffff:203.0.113.10"), {},
	}
	d := build(rs, vips)
	wantAddrs := []netip.Prefix{netip.MustParsePrefix("203.0.113.10/32"), netip.MustParsePrefix("2001:db8::10/128")}
	if !slices.Equal(d.Addresses, wantAddrs) {
		t.Errorf("addresses %v, want %v (IPv4 /32, IPv6 /128, deduplicated, sorted)", d.Addresses, wantAddrs)
	}
	var got []string
	for _, s := range d.Settings {
		g := s.Key + "=" + s.Value
		if s.Guard {
			g += " guard"
		}
		got = append(got, g)
	}
	want := []string{
		"net/ipv4/conf/all/arp_ignore=1 guard", "net/ipv4/conf/all/arp_announce=2 guard", "net/ipv4/conf/all/rp_filter=2",
		"net/ipv4/conf/eth0/arp_ignore=1", "net/ipv4/conf/eth0/arp_announce=2", "net/ipv4/conf/eth0/rp_filter=2",
		"net/ipv4/conf/bond0.7/arp_ignore=1", "net/ipv4/conf/bond0.7/arp_announce=2", "net/ipv4/conf/bond0.7/rp_filter=2",
	}
	if !slices.Equal(got, want) {
		t.Errorf("settings:\n got %q\nwant %q", got, want)
	}
	for _, s := range d.Settings {
		if !slices.Contains(s.Accept, s.Value) {
			t.Errorf("%s: Accept %v lacks Value %s: every pass would rewrite it", s.Key, s.Accept, s.Value)
		}
	}
}

// What each setting accepts decides what lvsd overwrites: a stricter
// operator choice stays, anything that would answer ARP for a VIP (or a
// strict reverse-path filter) is replaced.
func TestBuildAccepts(t *testing.T) {
	d := build(config.RealServer{}, nil)
	accepts := func(param, v string) bool {
		for _, s := range d.Settings {
			if s.Key == "net/ipv4/conf/all/"+param {
				return slices.Contains(s.Accept, v)
			}
		}
		t.Fatalf("no setting for %s", param)
		return false
	}
	for _, c := range []struct {
		param, value string
		keep         bool
	}{
		{"arp_ignore", "0", false}, {"arp_ignore", "1", true}, {"arp_ignore", "2", true},
		{"arp_ignore", "3", false}, // 3 answers for global-scope addresses: the VIPs
		{"arp_ignore", "8", true},
		{"arp_announce", "0", false}, {"arp_announce", "1", false}, {"arp_announce", "2", true},
		{"rp_filter", "0", true}, {"rp_filter", "1", false}, {"rp_filter", "2", true},
	} {
		if got := accepts(c.param, c.value); got != c.keep {
			t.Errorf("%s=%s kept=%v, want %v", c.param, c.value, got, c.keep)
		}
	}
}

// build is Build for configurations that cannot fail to render.
func build(rs config.RealServer, vips []netip.Addr) RealServerDesired {
	d, err := BuildRealServer(rs, vips)
	if err != nil {
		panic(err)
	}
	return d
}

func pfx(s string) netip.Prefix { return netip.MustParsePrefix(s) }

// onLo records the addresses ps as lvsd's on lo.
func onLo(ps ...string) []OwnedAddress {
	var out []OwnedAddress
	for _, p := range ps {
		out = append(out, OwnedAddress{Interface: Loopback, Prefix: pfx(p)})
	}
	return out
}

// fresh is a namespace as the kernel creates it: everything 0, lo with its
// loopback addresses.
func fresh() RealServerActual {
	a := RealServerActual{Loopback: []netip.Prefix{pfx("127.0.0.1/8"), pfx("::1/128")}, Sysctls: map[string]string{}}
	for _, dev := range []string{"all", "eth0"} {
		for _, p := range []string{"arp_ignore", "arp_announce", "rp_filter"} {
			a.Sysctls["net/ipv4/conf/"+dev+"/"+p] = "0"
		}
	}
	return a
}

func opStrings(ops []Op) []string {
	out := make([]string, len(ops))
	for i, o := range ops {
		out[i] = o.Describe()
	}
	return out
}

func TestPlan(t *testing.T) {
	rs := config.RealServer{ARPInterfaces: []string{"eth0"}}
	vip4, vip6 := netip.MustParseAddr("10.0.0.50"), netip.MustParseAddr("fd00::50")
	both := build(rs, []netip.Addr{vip4, vip6})
	only4 := build(rs, []netip.Addr{vip4})
	set := func(a RealServerActual, kv ...string) RealServerActual {
		a.Sysctls = maps.Clone(a.Sysctls)
		for i := 0; i < len(kv); i += 2 {
			a.Sysctls[kv[i]] = kv[i+1]
		}
		return a
	}
	withLo := func(a RealServerActual, ps ...string) RealServerActual {
		a.Loopback = slices.Clone(a.Loopback)
		for _, p := range ps {
			a.Loopback = append(a.Loopback, pfx(p))
		}
		return a
	}
	suppressed := set(fresh(), "net/ipv4/conf/all/arp_ignore", "1", "net/ipv4/conf/all/arp_announce", "2",
		"net/ipv4/conf/eth0/arp_ignore", "1", "net/ipv4/conf/eth0/arp_announce", "2")
	owned := Ownership{Addresses: onLo("10.0.0.50/32", "fd00::50/128"), Sysctls: []OwnedSysctl{
		{"net/ipv4/conf/all/arp_ignore", "0", "1"}, {"net/ipv4/conf/all/arp_announce", "0", "2"},
		{"net/ipv4/conf/eth0/arp_ignore", "0", "1"}, {"net/ipv4/conf/eth0/arp_announce", "0", "2"},
	}}
	cases := []struct {
		name string
		d    RealServerDesired
		a    RealServerActual
		rec  Ownership
		want []string
	}{
		{"cold start: sysctls before VIPs", both, fresh(), Ownership{}, []string{
			"set-sysctl net/ipv4/conf/all/arp_ignore=1 (was 0)", "set-sysctl net/ipv4/conf/all/arp_announce=2 (was 0)",
			"set-sysctl net/ipv4/conf/eth0/arp_ignore=1 (was 0)", "set-sysctl net/ipv4/conf/eth0/arp_announce=2 (was 0)",
			"add-address 10.0.0.50/32 dev lo", "add-address fd00::50/128 dev lo",
		}},
		{"in step: nothing", both, withLo(suppressed, "10.0.0.50/32", "fd00::50/128"), owned, nil},
		{"adopted by hand, not owned: nothing", both, withLo(suppressed, "10.0.0.50/32", "fd00::50/128"), Ownership{}, nil},
		{"a VIP by hand at another prefix length counts", only4, withLo(suppressed, "10.0.0.50/24"), Ownership{}, nil},
		{"stricter values stay", both, withLo(set(suppressed, "net/ipv4/conf/all/arp_ignore", "8", "net/ipv4/conf/eth0/arp_ignore", "2"),
			"10.0.0.50/32", "fd00::50/128"), owned, nil},
		{"strict rp_filter becomes loose", both, withLo(set(suppressed, "net/ipv4/conf/all/rp_filter", "1", "net/ipv4/conf/eth0/rp_filter", "1"),
			"10.0.0.50/32", "fd00::50/128"), owned, []string{
			"set-sysctl net/ipv4/conf/all/rp_filter=2 (was 1)", "set-sysctl net/ipv4/conf/eth0/rp_filter=2 (was 1)",
		}},
		{"a VIP leaves: only it goes", only4, withLo(suppressed, "10.0.0.50/32", "fd00::50/128"), owned, []string{
			"delete-address fd00::50/128 dev lo",
		}},
		{"a VIP leaves that was not ours: stays", only4, withLo(suppressed, "10.0.0.50/32", "fd00::50/128"), Ownership{}, nil},
		{"an owned VIP removed by hand is put back while configured", both, withLo(suppressed, "10.0.0.50/32"), owned, []string{
			"add-address fd00::50/128 dev lo",
		}},
		{"an owned VIP removed by hand and no longer configured is forgotten", only4, withLo(suppressed, "10.0.0.50/32"), owned, []string{
			"forget-address fd00::50/128 dev lo",
		}},
		{"interface dropped from arp_interfaces: restored", build(config.RealServer{}, []netip.Addr{vip4, vip6}),
			withLo(suppressed, "10.0.0.50/32", "fd00::50/128"), owned, []string{
				"restore-sysctl net/ipv4/conf/eth0/arp_ignore=0", "restore-sysctl net/ipv4/conf/eth0/arp_announce=0",
			}},
		{"changed by someone since: forgotten, not restored", build(config.RealServer{}, []netip.Addr{vip4, vip6}),
			withLo(set(suppressed, "net/ipv4/conf/eth0/arp_ignore", "2"), "10.0.0.50/32", "fd00::50/128"), owned, []string{
				"forget-sysctl net/ipv4/conf/eth0/arp_ignore", "restore-sysctl net/ipv4/conf/eth0/arp_announce=0",
			}},
		{"cleanup: addresses first, then sysctls", RealServerDesired{}, withLo(suppressed, "10.0.0.50/32", "fd00::50/128", "10.0.0.99/32"), owned, []string{
			"delete-address 10.0.0.50/32 dev lo", "delete-address fd00::50/128 dev lo",
			"restore-sysctl net/ipv4/conf/all/arp_ignore=0", "restore-sysctl net/ipv4/conf/all/arp_announce=0",
			"restore-sysctl net/ipv4/conf/eth0/arp_ignore=0", "restore-sysctl net/ipv4/conf/eth0/arp_announce=0",
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := opStrings(PlanRealServer(c.d, c.a, c.rec))
			if !slices.Equal(got, c.want) {
				t.Errorf("plan:\n got %q\nwant %q", got, c.want)
			}
		})
	}
}

// A missing named interface waits; a missing "all" (nothing proves ARP is
// suppressed) holds back every VIP.
func TestPlanMissingKeys(t *testing.T) {
	d := build(config.RealServer{ARPInterfaces: []string{"eth1"}}, []netip.Addr{netip.MustParseAddr("10.0.0.50")})
	a := fresh() // has no eth1 keys
	got := opStrings(PlanRealServer(d, a, Ownership{}))
	if !slices.Contains(got, "add-address 10.0.0.50/32 dev lo") || len(got) != 3 {
		t.Errorf("eth1 missing: %q, want the two all sysctls and the VIP", got)
	}
	delete(a.Sysctls, "net/ipv4/conf/all/arp_ignore")
	for _, op := range PlanRealServer(d, a, Ownership{}) {
		if op.Kind == AddAddress {
			t.Errorf("all/arp_ignore unreadable, yet the plan adds %s", op.Address)
		}
	}
}

func tunnelConfig(encap config.Encap, vips ...string) config.RealServer {
	t := config.RealServerTunnel{Encap: encap, MTU: config.DefaultTunnelMTU, ClampMSS: true}
	if encap == config.EncapGUE {
		t.Port = 6080
	}
	for _, v := range vips {
		t.VIPs = append(t.VIPs, netip.MustParseAddr(v))
	}
	return config.RealServer{ARPInterfaces: []string{"eth0"}, Tunnel: t}
}

// The devices follow the VIPs' families and the encapsulation; the MSS
// clamp follows the MTU less the worst overhead of the encapsulation.
func TestBuildDecapsulation(t *testing.T) {
	cases := []struct {
		name  string
		rs    config.RealServer
		links []string
		fou   []arp.FouPort
		nft   []string
	}{
		{"ipip, both families", tunnelConfig(config.EncapIPIP, "203.0.113.10", "2001:db8::10"),
			[]string{"ip6tnl0 ip6tnl", "tunl0 ipip"}, nil,
			[]string{"ip saddr 203.0.113.10 tcp flags syn,ack / fin,syn,rst,ack tcp option maxseg size > 1440 tcp option maxseg size set 1440",
				"ip6 saddr 2001:db8::10 tcp flags syn,ack / fin,syn,rst,ack tcp option maxseg size > 1400 tcp option maxseg size set 1400"}},
		{"gue", tunnelConfig(config.EncapGUE, "203.0.113.10"), []string{"tunl0 ipip"}, []arp.FouPort{{Port: 6080}},
			[]string{"maxseg size set 1428"}},
		{"gre", tunnelConfig(config.EncapGRE, "203.0.113.10"), []string{"gre0 gre"}, nil, []string{"maxseg size set 1436"}},
		{"gre, IPv6 as ip6ip6", tunnelConfig(config.EncapGRE, "2001:db8::10"), []string{"ip6tnl0 ip6tnl"}, nil, []string{"maxseg size set 1400"}},
		{"DR only", config.RealServer{}, nil, nil, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d := build(c.rs, []netip.Addr{netip.MustParseAddr("198.51.100.1")})
			var links []string
			for _, l := range d.Tunnel.Links {
				links = append(links, l.Name+" "+l.Kind)
			}
			if !slices.Equal(links, c.links) || !slices.Equal(d.Tunnel.FouPorts, c.fou) {
				t.Errorf("links %q fou %v, want %q %v", links, d.Tunnel.FouPorts, c.links, c.fou)
			}
			for _, want := range c.nft {
				if !strings.Contains(d.Tunnel.NAT.String(), want) {
					t.Errorf("nft lacks %q:\n%s", want, d.Tunnel.NAT)
				}
			}
			if d.Tunnel.WantsNAT() != (len(c.nft) > 0) {
				t.Errorf("wantsNAT = %v", d.Tunnel.WantsNAT())
			}
			if n := len(d.Addresses); n != 1+len(c.rs.Tunnel.VIPs) {
				t.Errorf("%d addresses on lo, want the DR VIP and every tunnel VIP: %v", n, d.Addresses)
			}
			v4dev := false
			for _, l := range d.Tunnel.Links {
				i := slices.IndexFunc(d.Settings, func(s RealServerSetting) bool { return s.Key == "net/ipv4/conf/"+l.Name+"/rp_filter" })
				if (i >= 0) != (l.Kind != arp.KindIP6IP6) || i >= 0 && d.Settings[i].Value != "0" {
					t.Errorf("%s: rp_filter setting %v (want 0 on IPv4 devices only)", l.Name, i)
				}
				v4dev = v4dev || i >= 0
			}
			// The kernel takes the larger of all and the device: with an
			// IPv4 tunnel device, all must be 0 too; otherwise loose will do.
			for _, s := range d.Settings {
				if s.Key == "net/ipv4/conf/all/rp_filter" && (s.Value == "0") != v4dev {
					t.Errorf("all/rp_filter wanted %s (accepting %v) with IPv4 tunnel devices = %v", s.Value, s.Accept, v4dev)
				}
			}
		})
	}
	off := tunnelConfig(config.EncapIPIP, "203.0.113.10")
	off.Tunnel.ClampMSS = false
	if d := build(off, nil); d.Tunnel.WantsNAT() {
		t.Errorf("clamp_mss false still wants nftables:\n%s", d.Tunnel.NAT)
	}
}
