package config

import (
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"
)

// The keys that keep the director's speaker closed: where it listens and
// how many prefixes a router may send before lvsd warns.
func TestBGPListenAndMaxPrefixes(t *testing.T) {
	const head = "interface: eth0\ncluster: {insecure: true, mode: ecmp}\n"
	peer := func(extra string) string {
		return "bgp:\n  asn: 65001\n" + extra + "  peers:\n    - {address: 10.0.0.10, asn: 65000}\n"
	}
	v4, v6 := netip.MustParseAddr("10.0.0.2"), netip.MustParseAddr("fd00::2")
	for _, c := range []struct {
		name, body  string
		listen      []netip.Addr
		port        uint16
		maxPrefixes uint32
		wantErr     string
	}{
		{"defaults: dial only, 100", peer(""), nil, 0, 100, ""},
		{"listen_port alone, as before", peer("  listen_port: 179\n"), nil, 179, 100, ""},
		{"listen addresses: port 179", peer("  listen_addresses: [10.0.0.2, 'fd00::2']\n"), []netip.Addr{v4, v6}, 179, 100, ""},
		{"listen addresses and port", peer("  listen_addresses: [10.0.0.2]\n  listen_port: 1179\n"), []netip.Addr{v4}, 1179, 100, ""},
		{"max_prefixes", "bgp:\n  asn: 65001\n  peers:\n    - {address: 10.0.0.10, asn: 65000, max_prefixes: 500}\n", nil, 0, 500, ""},
		{"unspecified listen address", peer("  listen_addresses: [0.0.0.0]\n"), nil, 0, 0,
			"lvsd.yaml:5:22: listen address 0.0.0.0 is not a unicast address of this director: name the addresses the routers connect to"},
		{"not an address", peer("  listen_addresses: [eth0]\n"), nil, 0, 0,
			`lvsd.yaml:5:22: listen address "eth0" is not an IP address of this director`},
		{"listed twice", peer("  listen_addresses: [10.0.0.2, 10.0.0.2]\n"), nil, 0, 0,
			"lvsd.yaml:5:32: listen address 10.0.0.2 is listed twice"},
		{"max_prefixes 0", "bgp:\n  asn: 65001\n  peers:\n    - {address: 10.0.0.10, asn: 65000, max_prefixes: 0}\n", nil, 0, 0,
			"lvsd.yaml:6:54: max_prefixes 0 is not in 1-1000000"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if c.wantErr != "" {
				if got := agentErrors(t, head+c.body); !strings.Contains(got, c.wantErr) {
					t.Fatalf("error %q, want one containing %q", got, c.wantErr)
				}
				return
			}
			a := loadAgentText(t, head+c.body)
			b := a.BGP
			if !slices.Equal(b.ListenAddresses, c.listen) || b.ListenPort != c.port || b.Peers[0].MaxPrefixes != c.maxPrefixes {
				t.Errorf("listen %v port %d max_prefixes %d; want %v %d %d", b.ListenAddresses, b.ListenPort, b.Peers[0].MaxPrefixes,
					c.listen, c.port, c.maxPrefixes)
			}
		})
	}
}

// Graceful restart is off unless asked for; a graceful_restart block turns
// it on, with the restart time the routers keep the paths.
func TestBGPGracefulRestart(t *testing.T) {
	const head = "interface: eth0\ncluster: {insecure: true, mode: ecmp}\nbgp:\n  asn: 65001\n" +
		"  peers:\n    - {address: 10.0.0.10, asn: 65000}\n"
	for _, c := range []struct {
		name, body string
		enabled    bool
		restart    time.Duration
		wantErr    string
	}{
		{"off by default", "", false, DefaultRestartTime, ""},
		{"a block turns it on", "  graceful_restart: {}\n", true, DefaultRestartTime, ""},
		{"restart time", "  graceful_restart: {restart_time: 2m}\n", true, 2 * time.Minute, ""},
		{"off explicitly", "  graceful_restart: {enabled: false, restart_time: 60s}\n", false, time.Minute, ""},
		{"fraction of a second", "  graceful_restart: {restart_time: 10.5s}\n", false, 0,
			`lvsd.yaml:7:36: restart_time "10.5s" is not a whole number of seconds from 5s to 4095s`},
		{"too long for the capability", "  graceful_restart: {restart_time: 2h}\n", false, 0,
			`lvsd.yaml:7:36: restart_time "2h" is not a whole number of seconds from 5s to 4095s`},
		{"unknown key", "  graceful_restart: {restart: 60s}\n", false, 0, "restart"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if c.wantErr != "" {
				if got := agentErrors(t, head+c.body); !strings.Contains(got, c.wantErr) {
					t.Fatalf("error %q, want one containing %q", got, c.wantErr)
				}
				return
			}
			a := loadAgentText(t, head+c.body)
			if a.BGP.GracefulRestart != c.enabled || a.BGP.RestartTime != c.restart {
				t.Errorf("graceful restart %t, %v; want %t, %v", a.BGP.GracefulRestart, a.BGP.RestartTime, c.enabled, c.restart)
			}
		})
	}
}
