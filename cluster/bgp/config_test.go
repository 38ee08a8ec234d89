package bgp

import (
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/lvsd/lvsd/cluster/bfd"
)

var (
	routerA = netip.MustParseAddr("10.0.0.10")
	routerB = netip.MustParseAddr("10.0.0.11")
	router6 = netip.MustParseAddr("fd00::10")
)

func baseConfig(peers ...PeerConfig) Config {
	return Config{ASN: 65001, RouterID: netip.MustParseAddr("10.0.0.2"), Peers: peers}
}

func TestConfigValidation(t *testing.T) {
	cases := []struct {
		name    string
		cfg     Config
		wantErr string // "" = valid
	}{
		{"minimal", baseConfig(PeerConfig{Address: routerA, ASN: 65000}), ""},
		{"two routers, v6 peer", baseConfig(PeerConfig{Address: routerA, ASN: 65000}, PeerConfig{Address: router6, ASN: 65000}), ""},
		{"no asn", Config{RouterID: routerA}, "local ASN missing"},
		{"v6 router id", Config{ASN: 1, RouterID: router6}, "router id fd00::10 must be an IPv4 address"},
		{"peer without asn", baseConfig(PeerConfig{Address: routerA}), "peer 10.0.0.10: peer ASN missing"},
		{"peer twice", baseConfig(PeerConfig{Address: routerA, ASN: 1}, PeerConfig{Address: routerA, ASN: 1}), "configured twice"},
		{"no address", baseConfig(PeerConfig{ASN: 1}), "a peer has no address"},
		{"link-local without interface", baseConfig(PeerConfig{Address: netip.MustParseAddr("fe80::1"), ASN: 1}), "needs an interface"},
		{"local of other family", baseConfig(PeerConfig{Address: routerA, ASN: 1, LocalAddress: router6}), "of the other family"},
		{"hold below 3 s", baseConfig(PeerConfig{Address: routerA, ASN: 1, HoldTime: 2 * time.Second}), "at least 3s"},
		{"fractional seconds", baseConfig(PeerConfig{Address: routerA, ASN: 1, HoldTime: 4500 * time.Millisecond}), "whole seconds"},
		{"keepalive too long", baseConfig(PeerConfig{Address: routerA, ASN: 1, HoldTime: 3 * time.Second, KeepaliveInterval: 2 * time.Second}), "at most a third"},
		{"hold 0 allowed", baseConfig(PeerConfig{Address: routerA, ASN: 1, HoldTime: 0}), ""},
		{"unknown family", baseConfig(PeerConfig{Address: routerA, ASN: 1, Families: []Family{"l2vpn"}}), `unknown family "l2vpn"`},
		{"v6 over v4 needs next hop", baseConfig(PeerConfig{Address: routerA, ASN: 1, Families: []Family{IPv4Unicast, IPv6Unicast}}),
			"ipv6-unicast routes over an ipv4-unicast session need a next hop"},
		{"v6 over v4 with next hop", func() Config {
			c := baseConfig(PeerConfig{Address: routerA, ASN: 1, Families: []Family{IPv4Unicast, IPv6Unicast}})
			c.NextHop6 = netip.MustParseAddr("fd00::2")
			return c
		}(), ""},
		{"bfd without server", baseConfig(PeerConfig{Address: routerA, ASN: 1, BFD: true}), "no BFD server"},
		{"bfd with server", func() Config {
			c := baseConfig(PeerConfig{Address: routerA, ASN: 1, BFD: true})
			c.BFD = bfd.NewFake()
			return c
		}(), ""},
		{"long password", baseConfig(PeerConfig{Address: routerA, ASN: 1, Password: strings.Repeat("x", 81)}), "longer than 80"},
		{"listen on own addresses", func() Config {
			c := baseConfig(PeerConfig{Address: routerA, ASN: 1})
			c.ListenAddresses = []netip.Addr{netip.MustParseAddr("10.0.0.2"), netip.MustParseAddr("fd00::2")}
			return c
		}(), ""},
		{"listen on every address", func() Config {
			c := baseConfig(PeerConfig{Address: routerA, ASN: 1})
			c.ListenAddresses = []netip.Addr{netip.IPv4Unspecified()}
			return c
		}(), "listen address 0.0.0.0 must be one of this director's unicast addresses"},
		{"listen twice", func() Config {
			c := baseConfig(PeerConfig{Address: routerA, ASN: 1})
			c.ListenAddresses = []netip.Addr{netip.MustParseAddr("10.0.0.2"), netip.MustParseAddr("::ffff:10.0.0.2")}
			return c
		}(), "listen address 10.0.0.2 given twice"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tc.cfg.withDefaults()
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("error %v, want one containing %q", err, tc.wantErr)
			}
		})
	}
}

func TestConfigDefaults(t *testing.T) {
	c, err := baseConfig(PeerConfig{Address: routerA, ASN: 65000}, PeerConfig{Address: router6, ASN: 65000}).withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	p := c.Peers[0]
	if p.Port != 179 || p.HoldTime != 9*time.Second || p.KeepaliveInterval != 3*time.Second ||
		p.ConnectRetry != 2*time.Second || len(p.Families) != 1 || p.Families[0] != IPv4Unicast {
		t.Errorf("defaults %+v", p)
	}
	if p.MaxPrefixes != DefaultMaxPrefixes || hardPrefixLimit(p.MaxPrefixes) != 10000 || hardPrefixLimit(1<<31) != 1<<32-1 {
		t.Errorf("max prefixes %d, hard limits %d %d", p.MaxPrefixes, hardPrefixLimit(p.MaxPrefixes), hardPrefixLimit(1<<31))
	}
	if c.Peers[1].Families[0] != IPv6Unicast || c.MD5Hint != DefaultMD5Hint || c.ListenPort != 0 {
		t.Errorf("v6 peer families %v, hint %v", c.Peers[1].Families, c.MD5Hint)
	}
}
