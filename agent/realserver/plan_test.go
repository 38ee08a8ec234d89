package realserver

import (
	"maps"
	"net/netip"
	"slices"
	"testing"

	"github.com/lvsd/lvsd/agent/config"
)

func pfx(s string) netip.Prefix { return netip.MustParsePrefix(s) }

// fresh is a namespace as the kernel creates it: everything 0, lo with its
// loopback addresses.
func fresh() Actual {
	a := Actual{Loopback: []netip.Prefix{pfx("127.0.0.1/8"), pfx("::1/128")}, Sysctls: map[string]string{}}
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
		out[i] = o.String()
	}
	return out
}

func TestPlan(t *testing.T) {
	rs := config.RealServer{ARPInterfaces: []string{"eth0"}}
	vip4, vip6 := netip.MustParseAddr("10.0.0.50"), netip.MustParseAddr("fd00::50")
	both := build(rs, []netip.Addr{vip4, vip6})
	only4 := build(rs, []netip.Addr{vip4})
	set := func(a Actual, kv ...string) Actual {
		a.Sysctls = maps.Clone(a.Sysctls)
		for i := 0; i < len(kv); i += 2 {
			a.Sysctls[kv[i]] = kv[i+1]
		}
		return a
	}
	withLo := func(a Actual, ps ...string) Actual {
		a.Loopback = slices.Clone(a.Loopback)
		for _, p := range ps {
			a.Loopback = append(a.Loopback, pfx(p))
		}
		return a
	}
	suppressed := set(fresh(), "net/ipv4/conf/all/arp_ignore", "1", "net/ipv4/conf/all/arp_announce", "2",
		"net/ipv4/conf/eth0/arp_ignore", "1", "net/ipv4/conf/eth0/arp_announce", "2")
	owned := Record{Addresses: []netip.Prefix{pfx("10.0.0.50/32"), pfx("fd00::50/128")}, Sysctls: []OwnedSysctl{
		{"net/ipv4/conf/all/arp_ignore", "0", "1"}, {"net/ipv4/conf/all/arp_announce", "0", "2"},
		{"net/ipv4/conf/eth0/arp_ignore", "0", "1"}, {"net/ipv4/conf/eth0/arp_announce", "0", "2"},
	}}
	cases := []struct {
		name string
		d    Desired
		a    Actual
		rec  Record
		want []string
	}{
		{"cold start: sysctls before VIPs", both, fresh(), Record{}, []string{
			"set-sysctl net/ipv4/conf/all/arp_ignore=1 (was 0)", "set-sysctl net/ipv4/conf/all/arp_announce=2 (was 0)",
			"set-sysctl net/ipv4/conf/eth0/arp_ignore=1 (was 0)", "set-sysctl net/ipv4/conf/eth0/arp_announce=2 (was 0)",
			"add-address 10.0.0.50/32 dev lo", "add-address fd00::50/128 dev lo",
		}},
		{"in step: nothing", both, withLo(suppressed, "10.0.0.50/32", "fd00::50/128"), owned, nil},
		{"adopted by hand, not owned: nothing", both, withLo(suppressed, "10.0.0.50/32", "fd00::50/128"), Record{}, nil},
		{"a VIP by hand at another prefix length counts", only4, withLo(suppressed, "10.0.0.50/24"), Record{}, nil},
		{"stricter values stay", both, withLo(set(suppressed, "net/ipv4/conf/all/arp_ignore", "8", "net/ipv4/conf/eth0/arp_ignore", "2"),
			"10.0.0.50/32", "fd00::50/128"), owned, nil},
		{"strict rp_filter becomes loose", both, withLo(set(suppressed, "net/ipv4/conf/all/rp_filter", "1", "net/ipv4/conf/eth0/rp_filter", "1"),
			"10.0.0.50/32", "fd00::50/128"), owned, []string{
			"set-sysctl net/ipv4/conf/all/rp_filter=2 (was 1)", "set-sysctl net/ipv4/conf/eth0/rp_filter=2 (was 1)",
		}},
		{"a VIP leaves: only it goes", only4, withLo(suppressed, "10.0.0.50/32", "fd00::50/128"), owned, []string{
			"delete-address fd00::50/128 dev lo",
		}},
		{"a VIP leaves that was not ours: stays", only4, withLo(suppressed, "10.0.0.50/32", "fd00::50/128"), Record{}, nil},
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
		{"cleanup: addresses first, then sysctls", Desired{}, withLo(suppressed, "10.0.0.50/32", "fd00::50/128", "10.0.0.99/32"), owned, []string{
			"delete-address 10.0.0.50/32 dev lo", "delete-address fd00::50/128 dev lo",
			"restore-sysctl net/ipv4/conf/all/arp_ignore=0", "restore-sysctl net/ipv4/conf/all/arp_announce=0",
			"restore-sysctl net/ipv4/conf/eth0/arp_ignore=0", "restore-sysctl net/ipv4/conf/eth0/arp_announce=0",
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := opStrings(Plan(c.d, c.a, c.rec))
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
	got := opStrings(Plan(d, a, Record{}))
	if !slices.Contains(got, "add-address 10.0.0.50/32 dev lo") || len(got) != 3 {
		t.Errorf("eth1 missing: %q, want the two all sysctls and the VIP", got)
	}
	delete(a.Sysctls, "net/ipv4/conf/all/arp_ignore")
	for _, op := range Plan(d, a, Record{}) {
		if op.Kind == AddAddress {
			t.Errorf("all/arp_ignore unreadable, yet the plan adds %s", op.Address)
		}
	}
}
