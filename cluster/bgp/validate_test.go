package bgp

import (
	"net/netip"
	"strings"
	"testing"
)

func TestValidateRoutes(t *testing.T) {
	ebgp := baseConfig(PeerConfig{Address: routerA, ASN: 65000})
	ibgp := baseConfig(PeerConfig{Address: routerA, ASN: 65001})
	both := baseConfig(PeerConfig{Address: routerA, ASN: 65000}, PeerConfig{Address: router6, ASN: 65000})
	vip := netip.MustParsePrefix("192.0.2.10/32")
	vip6 := netip.MustParsePrefix("2001:db8::10/128")
	med := uint32(10)
	cases := []struct {
		name    string
		cfg     Config
		routes  []Route
		wantErr string
	}{
		{"empty", ebgp, nil, ""},
		{"one VIP with attributes", ebgp, []Route{{Prefix: vip, Communities: []Community{1}, MED: &med, ASPathPrepend: 2}}, ""},
		{"both families", both, []Route{{Prefix: vip}, {Prefix: vip6}}, ""},
		{"v6 without a v6 session", ebgp, []Route{{Prefix: vip6}}, "no peer carries ipv6-unicast"},
		{"host bits", ebgp, []Route{{Prefix: netip.MustParsePrefix("192.0.2.10/24")}}, "did you mean 192.0.2.0/24"},
		{"twice", ebgp, []Route{{Prefix: vip}, {Prefix: vip}}, "listed twice"},
		{"invalid", ebgp, []Route{{}}, "invalid prefix"},
		{"mapped", ebgp, []Route{{Prefix: netip.MustParsePrefix("::ffff:192.0.2.10/128")}}, "IPv4-mapped"},
		{"next hop family", ebgp, []Route{{Prefix: vip, NextHop: netip.MustParseAddr("fd00::2")}}, "other family"},
		{"prepend bound", ebgp, []Route{{Prefix: vip, ASPathPrepend: 11}}, "outside 0-10"},
		{"prepend towards iBGP", ibgp, []Route{{Prefix: vip, ASPathPrepend: 1}}, "towards iBGP peer 10.0.0.10"},
		{"local-pref towards iBGP", ibgp, []Route{{Prefix: vip, LocalPref: 200}}, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := tc.cfg.withDefaults()
			if err != nil {
				t.Fatal(err)
			}
			got, err := validateRoutes(cfg, tc.routes)
			if tc.wantErr == "" {
				if err != nil || len(got) != len(tc.routes) {
					t.Fatalf("got %v, %v", got, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("error %v, want %q", err, tc.wantErr)
			}
		})
	}
}
