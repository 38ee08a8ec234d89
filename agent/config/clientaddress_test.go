package config

import (
	"net/netip"
	"reflect"
	"strings"
	"testing"
)

const fullnatHead = "service: web\nvip: 10.0.0.50\nports: [443]\nforwarding: fullnat\nfullnat:\n  source_addresses: [10.0.1.200, 10.0.1.201]\n"

// A director of the release before client_address digests an old-style
// service to exactly these values (computed on that release): this one must
// too, or the two would see each other's configuration as different during
// a rolling upgrade.
func TestServiceDigestUnchangedByClientAddress(t *testing.T) {
	for _, c := range []struct {
		name, text string
		want       uint64
	}{
		{"dr", "service: web\nvip: 10.0.0.50\nports: [80]\nbackends:\n  - {address: 10.0.0.11}\n", 0xf5f8094c0f9a4372},
		{"fullnat", fullnatHead + "health:\n  checks:\n    - {type: tcp}\nbackends:\n  - {address: 10.0.1.11}\n  - {address: 10.0.1.12, port: 8443}\n", 0x8079b3a5320b8dfa},
		{"fullnat, the default written out", fullnatHead + "client_address: director\nhealth:\n  checks:\n    - {type: tcp}\nbackends:\n  - {address: 10.0.1.11}\n  - {address: 10.0.1.12, port: 8443}\n", 0x8079b3a5320b8dfa},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := parseOne(t, "a.yaml", c.text).Digest(); got != c.want {
				t.Errorf("digest %#x, the previous release's %#x", got, c.want)
			}
		})
	}
	toa := parseOne(t, "a.yaml", fullnatHead+"client_address: toa\nhealth:\n  checks:\n    - {type: tcp}\nbackends:\n  - {address: 10.0.1.11}\n  - {address: 10.0.1.12, port: 8443}\n")
	if toa.ClientAddress != ClientAddressTOA || toa.Digest() == 0x8079b3a5320b8dfa {
		t.Errorf("client_address toa: %q, digest %#x: want toa and a digest of its own", toa.ClientAddress, toa.Digest())
	}
}

func TestClientAddressRejects(t *testing.T) {
	const one = "backends: [{address: 10.0.1.11}]\n"
	for _, c := range []struct{ name, body, want string }{
		{"unknown mode", fullnatHead + "client_address: proxy\n" + one,
			`svc.yaml:7:17: service "web": client_address "proxy" is not one of toa, director`},
		{"dr", "service: web\nvip: 10.0.0.50\nports: [80]\nclient_address: toa\n" + one,
			`svc.yaml:4:17: service "web": client_address toa needs forwarding: fullnat (with dr the real servers see the client's address already, or cannot be told it)`},
		{"udp", strings.Replace(fullnatHead, "ports: [443]", "protocol: udp\nports: [443]", 1) + "client_address: toa\n" + one,
			`svc.yaml:8:17: service "web": client_address toa needs protocol tcp (the address travels in a TCP option)`},
		{"all ports", strings.Replace(fullnatHead, "ports: [443]", "ports: [all]", 1) + "client_address: toa\n" + one,
			`svc.yaml:7:17: service "web": client_address toa needs the service's ports listed, not [all] (the director's program looks each VIP:port up)`},
		{"too many ports", strings.Replace(fullnatHead, "ports: [443]", "ports: [1000-6000]", 1) + "client_address: toa\n" + one,
			`svc.yaml:7:17: service "web": client_address toa takes at most 4096 ports (the program's map); the service has 5001`},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := serviceErrors(t, c.body); got != c.want {
				t.Errorf("got  %s\nwant %s", got, c.want)
			}
		})
	}
}

func TestRealServerTOA(t *testing.T) {
	a := loadAgentText(t, "role: realserver\nrealserver:\n  client_address:\n    mode: toa\n    directors: [10.0.1.200, \"::ffff:10.0.1.201\", fd00:1::200]\n    backends: [10.0.1.11:443, \"[fd00:1::11]:443\"]\n")
	want := RealServerTOA{
		Directors: []netip.Addr{netip.MustParseAddr("10.0.1.200"), netip.MustParseAddr("10.0.1.201"), netip.MustParseAddr("fd00:1::200")},
		Backends:  []netip.AddrPort{netip.MustParseAddrPort("10.0.1.11:443"), netip.MustParseAddrPort("[fd00:1::11]:443")},
		Cgroup:    DefaultTOACgroup,
	}
	if !reflect.DeepEqual(a.RealServer.TOA, want) || !a.RealServer.TOA.Enabled() {
		t.Errorf("got %+v\nwant %+v", a.RealServer.TOA, want)
	}
	if b := loadAgentText(t, "role: realserver\nrealserver: {}\n"); b.RealServer.TOA.Enabled() {
		t.Errorf("without the block: %+v", b.RealServer.TOA)
	}
}

func TestRealServerTOARejects(t *testing.T) {
	const head = "role: realserver\nrealserver:\n  client_address:\n"
	const good = "    directors: [10.0.1.200]\n    backends: [10.0.1.11:443]\n"
	for _, c := range []struct{ name, body, want string }{
		{"no mode", head + good, `lvsd.yaml:4:5: client_address mode "" is not toa (the only mode; leave the block out for none)`},
		{"relative cgroup", head + "    mode: toa\n    cgroup: lvsd\n" + good,
			`lvsd.yaml:5:13: client_address cgroup "lvsd" is not an absolute path like /sys/fs/cgroup`},
		{"no directors", head + "    mode: toa\n    backends: [10.0.1.11:443]\n",
			`lvsd.yaml:4:5: client_address needs directors: the directors' FULLNAT source addresses (fullnat.source_addresses of the services)`},
		{"bad director", head + "    mode: toa\n    directors: [10.0.1.200/24]\n    backends: [10.0.1.11:443]\n",
			`lvsd.yaml:5:17: client_address director "10.0.1.200/24" is not a unicast IP address (a director's FULLNAT source address)`},
		{"no backends", head + "    mode: toa\n    directors: [10.0.1.200]\n",
			`lvsd.yaml:4:5: client_address needs backends: this host's address:port as the services' backends name it, like 10.0.1.11:80`},
		{"backend without port", head + "    mode: toa\n    directors: [10.0.1.200]\n    backends: [10.0.1.11]\n",
			`lvsd.yaml:6:16: client_address backend "10.0.1.11" is not an address and port like 10.0.1.11:80 or [fd00::11]:80`},
		{"backend twice", head + "    mode: toa\n    directors: [10.0.1.200]\n    backends: [10.0.1.11:443, 10.0.1.11:443]\n",
			`lvsd.yaml:6:31: client_address backend 10.0.1.11:443 is listed twice`},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := agentErrors(t, c.body); got != c.want {
				t.Errorf("got  %s\nwant %s", got, c.want)
			}
		})
	}
}
