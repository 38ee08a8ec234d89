package cluster

import (
	"context"
	"net/netip"
	"slices"
	"testing"
)

func TestDefaultSources(t *testing.T) {
	ctx := context.Background()
	pp := netip.MustParsePrefix
	cases := []struct {
		name        string
		bind, iface string
		peers       []string
		want        []netip.Prefix
	}{
		{"peers and lo's subnet", "127.0.0.1:7946", "", []string{"10.0.0.2:7946", "[fd00::4]:8000", "10.0.0.2:7000"},
			[]netip.Prefix{pp("10.0.0.2/32"), pp("fd00::4/128"), pp("127.0.0.0/8")}},
		{"a bind the host does not have", "192.0.2.77:7946", "", nil, []netip.Prefix{pp("192.0.2.77/32")}},
		{"bind unset, lo has no global address", ":7946", "lo", []string{"localhost:7946"}, []netip.Prefix{pp("127.0.0.1/32")}},
	}
	for _, c := range cases {
		got := DefaultSources(ctx, c.bind, c.iface, c.peers)
		for _, w := range c.want {
			if !slices.Contains(got, w) {
				t.Errorf("%s: DefaultSources = %v, missing %v", c.name, got, w)
			}
		}
		if c.name != "bind unset, lo has no global address" && len(got) != len(c.want) {
			t.Errorf("%s: DefaultSources = %v, want %v", c.name, got, c.want)
		}
	}
}
