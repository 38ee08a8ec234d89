package realserver

import (
	"net/netip"
	"slices"
	"testing"

	"github.com/lvsd/lvsd/agent/config"
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
func build(rs config.RealServer, vips []netip.Addr) Desired {
	d, err := Build(rs, vips)
	if err != nil {
		panic(err)
	}
	return d
}
