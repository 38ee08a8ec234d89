package config

import (
	"strings"
	"testing"
)

func TestTunnelServices(t *testing.T) {
	const head = "vip: 10.0.0.50\nports: [80]\nforwarding: tunnel\n"
	p := writeFile(t, t.TempDir(), "svc.yaml", "service: ipip\n"+head+"backends: [{address: 10.0.1.11}]\n---\n"+
		"service: gue\n"+strings.Replace(head, "10.0.0.50", "10.0.0.51", 1)+"tunnel: {encap: gue, port: 6080, checksum: checksum}\nbackends: [{address: 10.0.1.11, port: 80}]\n---\n"+
		"service: gre\nvip: 10.0.0.52\nports: [all]\nprotocol: any\nforwarding: tunnel\ntunnel: {encap: gre}\nbackends: [{address: 10.0.1.11}]\n---\n"+
		"service: v6\nvip: \"fd00::50\"\nports: [80]\nforwarding: tunnel\nbackends: [{address: \"fd01::11\"}]\n")
	svcs, err := loadServiceFiles(p)
	if err != nil {
		t.Fatal(err)
	}
	want := []TunnelOptions{
		{Encap: EncapIPIP, Checksum: ChecksumNone},
		{Encap: EncapGUE, Port: 6080, Checksum: ChecksumOuter},
		{Encap: EncapGRE, Checksum: ChecksumNone},
		{Encap: EncapIPIP, Checksum: ChecksumNone},
	}
	overhead := []int{20, 32, 24, 40}
	for i, s := range svcs {
		if s.Forwarding != Tunnel || s.Tunnel != want[i] {
			t.Errorf("%s: forwarding %s tunnel %+v, want tunnel %+v", s.Name, s.Forwarding, s.Tunnel, want[i])
		}
		if got := s.Tunnel.Overhead(s.VIP.Is6()); got != overhead[i] {
			t.Errorf("%s: overhead %d bytes, want %d", s.Name, got, overhead[i])
		}
	}
	if got := svcs[1].Tunnel.String(); got != "gue port 6080 checksum" {
		t.Errorf("String() = %q", got)
	}
}

// lvsd check refuses what cannot work, at the line and column of the culprit.
func TestTunnelServicesBad(t *testing.T) {
	const head = "service: web\nvip: 10.0.0.50\nports: [80]\n"
	const tunnel = head + "forwarding: tunnel\n"
	const oneBackend = "backends:\n  - {address: 10.0.1.11}\n"
	cases := []badCase{
		{"tunnel block without tunnel forwarding", head + "tunnel: {encap: gue, port: 6080}\n" + oneBackend, ":4:10: service \"web\": tunnel needs forwarding: tunnel"},
		{"unknown encap", tunnel + "tunnel: {encap: vxlan}\n" + oneBackend, ":5:17: service \"web\": tunnel encap \"vxlan\" is not one of ipip, gue, gre"},
		{"gue without port", tunnel + "tunnel: {encap: gue}\n" + oneBackend, ":5:10: service \"web\": encap gue needs tunnel.port"},
		{"port for ipip", tunnel + "tunnel: {port: 6080}\n" + oneBackend, ":5:16: service \"web\": tunnel.port is for encap gue only (ipip has no port)"},
		{"port out of range", tunnel + "tunnel: {encap: gue, port: 70000}\n" + oneBackend, ":5:28: service \"web\": port 70000 is not in 1-65535"},
		{"bad checksum", tunnel + "tunnel: {encap: gue, port: 6080, checksum: yes}\n" + oneBackend, ":5:44: service \"web\": tunnel checksum \"yes\" is not one of none, checksum"},
		{"ipip checksum", tunnel + "tunnel: {checksum: checksum}\n" + oneBackend, ":5:20: service \"web\": encap ipip has no checksum of its own"},
		{"gre checksum", tunnel + "tunnel: {encap: gre, checksum: checksum}\n" + oneBackend, ":5:32: service \"web\": a real server's gre0 (the fallback device, no icsum) drops GRE packets with a checksum"},
		{"gue remote checksum", tunnel + "tunnel: {encap: gue, port: 6080, checksum: remote}\n" + oneBackend, ":5:44: service \"web\": GUE remote checksum offload is not supported"},
		{"nat gateway", tunnel + "nat: {gateway: 10.0.0.9}\n" + oneBackend, ":5:16: service \"web\": nat.gateway needs forwarding: nat"},
		{"fullnat sources", tunnel + "fullnat: {source_addresses: [10.0.0.200]}\n" + oneBackend, ":5:11: service \"web\": fullnat.source_addresses needs forwarding: fullnat"},
		{"mixed families", tunnel + "backends:\n  - {address: \"fd01::11\"}\n", ":6:15: service \"web\": backend fd01::11 and vip 10.0.0.50 are of different IP families (lvsd tunnels within one family"},
		{"port change", tunnel + "backends:\n  - {address: 10.0.1.11, port: 8080}\n", ":6:32: service \"web\": forwarding tunnel cannot change the port"},
		{"gue over IPv6", "service: web\nvip: \"fd00::50\"\nports: [80]\nforwarding: tunnel\ntunnel: {encap: gue, port: 6080}\n" + oneBackend, ":5:17: service \"web\": encap gue is for IPv4 services; an IPv6 service tunnels with ipip"},
		{"unknown key", tunnel + "tunnel: {encap: gue, port: 6080, mtu: 1400}\n" + oneBackend, ":5:34: service \"web\": unknown key \"mtu\" (keys here: encap, port, checksum)"},
	}
	checkBadServices(t, cases)
}
