package config

import (
	"net/netip"
	"reflect"
	"testing"
)

func TestRealServerTunnel(t *testing.T) {
	a, err := LoadAgent(writeFile(t, t.TempDir(), "lvsd.yaml", `
role: realserver
realserver:
  vips: [10.0.0.50]
  tunnel:
    vips: [203.0.113.10, "2001:db8::10"]
    encap: gue
    port: 6080
    mtu: 9000
`))
	if err != nil {
		t.Fatal(err)
	}
	want := RealServerTunnel{VIPs: []netip.Addr{netip.MustParseAddr("203.0.113.10"), netip.MustParseAddr("2001:db8::10")},
		Encap: EncapGUE, Port: 6080, MTU: 9000, ClampMSS: true}
	if got := a.RealServer.Tunnel; !reflect.DeepEqual(got, want) {
		t.Errorf("got %+v, want %+v", got, want)
	}
	// IPv4 pays IP, UDP and GUE headers; IPv6 arrives as IPv6-in-IPv6.
	if m4, m6 := want.MSS(false), want.MSS(true); m4 != 9000-32-40 || m6 != 9000-40-60 {
		t.Errorf("MSS %d / %d", m4, m6)
	}
	a, err = LoadAgent(writeFile(t, t.TempDir(), "lvsd.yaml", "role: realserver\nrealserver:\n  tunnel: {vips: [203.0.113.10], clamp_mss: false}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if got := a.RealServer.Tunnel; got.Encap != EncapIPIP || got.MTU != DefaultTunnelMTU || got.ClampMSS || got.MSS(false) != 1440 {
		t.Errorf("defaults: %+v", got)
	}
}

func TestRealServerTunnelBad(t *testing.T) {
	const head = "role: realserver\nrealserver:\n  vips: [10.0.0.50]\n  tunnel:\n"
	cases := []badCase{
		{"no vips", head + "    encap: ipip\n", ":5:5: realserver.tunnel needs vips"},
		{"vip in both lists", head + "    vips: [10.0.0.50]\n", ":5:12: vip 10.0.0.50 is also in realserver.vips"},
		{"bad vip", head + "    vips: [10.0.0.500]\n", ":5:12: vip \"10.0.0.500\" is not an IP address"},
		{"unknown encap", head + "    vips: [10.0.0.51]\n    encap: vxlan\n", ":6:12: tunnel encap \"vxlan\" is not one of ipip, gue, gre"},
		{"gue without port", head + "    vips: [10.0.0.51]\n    encap: gue\n", ":5:5: encap gue needs port"},
		{"port for gre", head + "    vips: [10.0.0.51]\n    encap: gre\n    port: 6080\n", ":7:11: port is for encap gue only (gre has no port)"},
		{"mtu too small", head + "    vips: [10.0.0.51]\n    mtu: 576\n", ":6:10: mtu 576 is not in 1280-65535"},
		{"unknown key", head + "    vips: [10.0.0.51]\n    mss: 1400\n", ":6:5: unknown key \"mss\" (keys here: vips, encap, port, mtu, clamp_mss)"},
	}
	checkBadAgents(t, cases)
}
