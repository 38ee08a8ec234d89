package config

import (
	"net/netip"
	"strings"
	"testing"
	"time"
)

func TestTrack(t *testing.T) {
	gw := netip.MustParseAddr("10.0.0.1")
	for _, c := range []struct {
		name, block string
		address     netip.Addr
		checks      []string // types
		fall        int
		err         string
	}{
		{"none", "", netip.Addr{}, nil, 0, ""},
		{"gateway ping", "track: {address: 10.0.0.1, interval: 500ms, timeout: 400ms, fall: 2, checks: [{type: icmp}]}\n",
			gw, []string{"icmp"}, 2, ""},
		{"router's BGP port and a script", "track:\n  address: 10.0.0.1\n  checks: [{type: tcp, port: 179}, {type: exec, command: [/bin/true]}]\n",
			gw, []string{"tcp", "exec"}, DefaultFall, ""},
		{"a script alone", "track: {checks: [{type: exec, command: [/bin/true]}]}\n", netip.Addr{}, []string{"exec"}, DefaultFall, ""},
		{"no address", "track: {checks: [{type: icmp}]}\n", netip.Addr{}, nil, 0, "lvsd.yaml:3:9: track: address is required for its icmp checks"},
		{"bad address", "track: {address: gateway, checks: [{type: icmp}]}\n", netip.Addr{}, nil, 0, `lvsd.yaml:3:18: track: address "gateway" is not an IP address`},
		{"address nothing probes", "track: {address: 10.0.0.1, checks: [{type: exec, command: [/bin/true]}]}\n", netip.Addr{}, nil, 0, "probed by no check"},
		{"tcp without a port", "track: {address: 10.0.0.1, checks: [{type: tcp}]}\n", netip.Addr{}, nil, 0, "lvsd.yaml:3:38: track: a tcp check needs a port"},
		{"no checks", "track: {address: 10.0.0.1}\n", netip.Addr{}, nil, 0, "lvsd.yaml:3:9: track: health needs at least one check"},
		{"bad check type", "track: {address: 10.0.0.1, checks: [{type: arp}]}\n", netip.Addr{}, nil, 0, `track: check type "arp" is not one of`},
		{"short interval", "track: {address: 10.0.0.1, checks: [{type: icmp, interval: 10ms}]}\n", netip.Addr{}, nil, 0, "track: check interval 10ms is below 100ms"},
		{"unknown key", "track: {address: 10.0.0.1, weight_header: true, checks: [{type: icmp}]}\n", netip.Addr{}, nil, 0, "weight_header"},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := writeFile(t, t.TempDir(), "lvsd.yaml", "node: d1\ninterface: eth0\n"+c.block)
			a, err := LoadAgent(p)
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("error %v, want %q", err, c.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if c.checks == nil {
				if a.Track != nil {
					t.Errorf("Track %+v, want none", a.Track)
				}
				return
			}
			var types []string
			for _, ch := range a.Track.Health.Checks {
				types = append(types, ch.Type)
				if ch.Interval < 100*time.Millisecond {
					t.Errorf("check interval %v", ch.Interval)
				}
			}
			if a.Track.Address != c.address || strings.Join(types, ",") != strings.Join(c.checks, ",") || a.Track.Health.Fall != c.fall {
				t.Errorf("Track %s %v fall %d, want %s %v fall %d", a.Track.Address, types, a.Track.Health.Fall, c.address, c.checks, c.fall)
			}
		})
	}
}

func TestTrackIsForDirectors(t *testing.T) {
	p := writeFile(t, t.TempDir(), "lvsd.yaml", "node: r1\nrole: realserver\nrealserver: {vips: [203.0.113.10]}\ntrack: {address: 10.0.0.1, checks: [{type: icmp}]}\n")
	if _, err := LoadAgent(p); err == nil || !strings.Contains(err.Error(), "track is for role director") {
		t.Fatalf("error %v", err)
	}
}
