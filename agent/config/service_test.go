package config

import (
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// loadServiceFiles reads and checks the named service files as
// servicesdir.LoadFiles does under strict modes, but not against each
// other: the checks between services are servicesdir's.
func loadServiceFiles(files ...string) ([]*Service, error) {
	var out []*Service
	var errs List
	for _, f := range files {
		data, err := ReadServiceFile(f, true, nil)
		if err != nil {
			errs = append(errs, &Error{File: f, Msg: err.Error()})
			continue
		}
		for _, s := range ParseServices(f, data, &errs, false) {
			out = append(out, &s)
		}
	}
	if len(errs) > 0 {
		return nil, errs
	}
	return out, nil
}

func writeFile(t *testing.T, dir, name, body string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// Each case is a malformed file; the error must name the file, the line and
// column of the culprit, and say what is wrong.
func TestLoadServicesBad(t *testing.T) {
	const head = "service: web\nvip: 10.0.0.50\nports: [80]\n"
	const oneBackend = "backends:\n  - {address: 10.0.0.11}\n"
	cases := []badCase{
		{"unknown key", head + oneBackend + "colour: red\n", ":6:1: service \"web\": unknown key \"colour\" (keys here: service, vip, protocol, ports, forwarding, scheduler, affinity, backends, sorry_server, source_ranges, fullnat, client_address, interface, nat, tunnel, persistence, persistence_on_unhealthy, drain_timeout, health, failover, when_none_healthy, announce)"},
		{"unknown backend key", head + "backends:\n  - {address: 10.0.0.11, wieght: 2}\n", ":5:26: service \"web\": unknown key \"wieght\" (did you mean weight?)"},
		{"no name", "vip: 10.0.0.50\nports: [80]\n" + oneBackend, ":1:1: service: a name is required"},
		{"bad vip", "service: web\nvip: 10.0.0.500\nports: [80]\n" + oneBackend, ":2:6: service \"web\": vip \"10.0.0.500\" is not an IP address"},
		{"multicast vip", "service: web\nvip: 224.0.0.1\nports: [80]\n" + oneBackend, ":2:6: service \"web\": vip 224.0.0.1 must be a unicast address"},
		{"no vip", "service: web\nports: [80]\n" + oneBackend, ":1:1: service \"web\": vip is required"},
		{"bad protocol", head + "protocol: icmp\n" + oneBackend, ":4:11: service \"web\": protocol \"icmp\" is not one of"},
		{"port zero", "service: web\nvip: 10.0.0.50\nports: [0]\n" + oneBackend, ":3:9: service \"web\": port \"0\" is not a port"},
		{"port too big", "service: web\nvip: 10.0.0.50\nports: [70000]\n" + oneBackend, ":3:9: service \"web\": port \"70000\""},
		{"backwards range", "service: web\nvip: 10.0.0.50\nports: [\"90-80\"]\n" + oneBackend, ":3:9: service \"web\": port range \"90-80\" ends before it starts"},
		{"overlapping ports", "service: web\nvip: 10.0.0.50\nports: [80, \"70-85\"]\n" + oneBackend, ":3:8: service \"web\": ports 70-85 and 80 overlap"},
		{"all with others", "service: web\nvip: 10.0.0.50\nports: [all, 80]\n" + oneBackend, ":3:9: service \"web\": \"all\" cannot be combined"},
		{"no ports", "service: web\nvip: 10.0.0.50\n" + oneBackend, ":1:1: service \"web\": ports is required"},
		{"bad forwarding", head + "forwarding: tun\n" + oneBackend, ":4:13: service \"web\": forwarding \"tun\" is not one of dr, nat, fullnat"},
		{"bad scheduler", head + "scheduler: maglev\n" + oneBackend, ":4:12: service \"web\": scheduler \"maglev\" is not one of mh, rr"},
		{"bad affinity", head + "affinity: sticky\n" + oneBackend, ":4:11: service \"web\": affinity \"sticky\" is not one of"},
		{"no backends", head, ":1:1: service \"web\": backends is required"},
		{"empty backends", head + "backends: []\n", ":1:1: service \"web\": backends is required"},
		{"bad backend", head + "backends:\n  - {address: rs1}\n", ":5:15: service \"web\": backend address \"rs1\" is not an IP address"},
		{"family mix", head + "backends:\n  - {address: \"fd00::11\"}\n", ":5:15: service \"web\": backend fd00::11 and vip 10.0.0.50 are of different IP families"},
		{"dr port change", head + "backends:\n  - {address: 10.0.0.11, port: 8080}\n", ":5:32: service \"web\": forwarding dr cannot change the port"},
		{"backend port range", "service: web\nvip: 10.0.0.50\nports: [80, 81]\nforwarding: nat\nbackends:\n  - {address: 10.0.0.11, port: 8080}\n", ":6:32: service \"web\": a backend port needs a service with exactly one port"},
		{"weight negative", head + "backends:\n  - {address: 10.0.0.11, weight: -1}\n", ":5:34: service \"web\": weight -1 is not in 0-65535"},
		{"weight too big", head + "backends:\n  - {address: 10.0.0.11, weight: 70000}\n", ":5:34: service \"web\": weight 70000 is not in 0-65535"},
		{"duplicate backend", head + "backends:\n  - {address: 10.0.0.11}\n  - {address: 10.0.0.11}\n", ":6:15: service \"web\": backend 10.0.0.11 is listed twice"},
		{"type error", head + "backends:\n  - {address: 10.0.0.11, weight: heavy}\n", ":5:34: service \"web\": weight: want a whole number (0-65535), not \"heavy\""},
		{"list expected", "service: web\nvip: 10.0.0.50\nports: 80\n" + oneBackend, ":3:8: service \"web\": ports: want a list ([a, b], or one \"- item\" line each), not 80"},
		{"syntax error", head + "backends:\n  - {address: 10.0.0.11\n", ":5:"},
		{"duplicate key", head + "vip: 10.0.0.51\n" + oneBackend, ":4:1:"},
		{"bad source range", head + oneBackend + "source_ranges: [10.0.0.0/33]\n", ":6:17: service \"web\": source range \"10.0.0.0/33\" is not a CIDR prefix"},
		{"source host bits", head + oneBackend + "source_ranges: [10.0.0.1/24]\n", ":6:17: service \"web\": source range 10.0.0.1/24 has host bits set (did you mean 10.0.0.0/24?)"},
		{"source family", head + oneBackend + "source_ranges: [\"fd00::/64\"]\n", ":6:17: service \"web\": source range fd00::/64 and vip 10.0.0.50 are of different IP families"},
		{"fullnat without addresses", head + "forwarding: fullnat\n" + oneBackend, ":1:1: service \"web\": forwarding fullnat needs fullnat.source_addresses"},
		{"per_director without fullnat", head + "fullnat: {per_director: {lb1: [10.0.0.200]}}\n" + oneBackend, ":4:11: service \"web\": fullnat.per_director needs forwarding: fullnat"},
		{"per_director and source_addresses", head + "forwarding: fullnat\nfullnat: {source_addresses: [10.0.0.201], per_director: {lb1: [10.0.0.200]}}\n" + oneBackend, ":5:11: service \"web\": give fullnat.source_addresses (one director or active-standby) or fullnat.per_director (cluster mode ecmp), not both"},
		{"per_director shared address", head + "forwarding: fullnat\nfullnat:\n  per_director:\n    lb1: [10.0.0.200, 10.0.0.201]\n    lb2: [10.0.0.201]\n" + oneBackend, ":8:10: service \"web\": SNAT address 10.0.0.201 is given to directors \"lb1\" and \"lb2\"; each needs its own"},
		{"per_director not consecutive", head + "forwarding: fullnat\nfullnat:\n  per_director:\n    lb1: [10.0.0.200, 10.0.0.202]\n" + oneBackend, ":7:10: service \"web\": SNAT addresses must be consecutive"},
		{"per_director empty", head + "forwarding: fullnat\nfullnat:\n  per_director:\n    lb1: []\n" + oneBackend, ":7:10: service \"web\": fullnat.per_director needs a node name and at least one address for it"},
		{"per_director family", head + "forwarding: fullnat\nfullnat:\n  per_director:\n    lb1: [\"fd00::1\"]\n" + oneBackend, ":7:11: service \"web\": SNAT address fd00::1 and vip 10.0.0.50 are of different IP families"},
		{"snat not consecutive", head + "forwarding: fullnat\nfullnat: {source_addresses: [10.0.0.200, 10.0.0.202]}\n" + oneBackend, ":5:29: service \"web\": SNAT addresses must be consecutive"},
		{"snat without fullnat", head + "fullnat: {source_addresses: [10.0.0.200]}\n" + oneBackend, ":4:11: service \"web\": fullnat.source_addresses needs forwarding: fullnat"},
		{"gateway without nat", head + "nat: {gateway: 10.0.0.9}\n" + oneBackend, ":4:16: service \"web\": nat.gateway needs forwarding: nat"},
		{"gateway not an address", head + "forwarding: nat\nnat: {gateway: 10.0.0}\n" + oneBackend, ":5:16: service \"web\": nat.gateway \"10.0.0\" is not an IP address"},
		{"gateway other family", head + "forwarding: nat\nnat: {gateway: \"fd00::9\"}\n" + oneBackend, ":5:16: service \"web\": nat.gateway fd00::9 and vip 10.0.0.50 are of different IP families"},
		{"bad interface", head + "interface: \"eth 1\"\n" + oneBackend, ":4:12: service \"web\": interface \"eth 1\" is not an interface name"},
		{"interface too long", head + "interface: averyveryverylongname\n" + oneBackend, ":4:12: service \"web\": interface \"averyveryverylongname\" is not an interface name"},
		{"bad gateway interface", head + "forwarding: nat\nnat: {gateway: 10.0.1.1, gateway_interface: \"eth1:0\"}\n" + oneBackend, ":5:45: service \"web\": nat.gateway_interface \"eth1:0\" is not an interface name"},
		{"gateway interface alone", head + "forwarding: nat\nnat: {gateway_interface: eth1}\n" + oneBackend, ":5:26: service \"web\": nat.gateway_interface needs nat.gateway"},
		{"gateway is the vip", head + "forwarding: nat\nnat: {gateway: 10.0.0.50}\n" + oneBackend, ":5:16: service \"web\": nat.gateway must not be the vip"},
		{"bad drain timeout", head + oneBackend + "drain_timeout: soon\n", ":6:16: service \"web\": drain_timeout \"soon\" is not a duration"},
		{"persistence netmask", head + oneBackend + "persistence: {timeout: 5m, netmask: 33}\n", ":6:37: service \"web\": persistence netmask /33 is not in 1-32"},
		{"any with ports", "service: web\nvip: 10.0.0.50\nprotocol: any\nports: [80]\n" + oneBackend, ":4:8: service \"web\": protocol any takes every port: write ports: [all]"},
		{"bad check type", head + oneBackend + "health: {checks: [{type: ping}]}\n", ":6:26: service \"web\": check type \"ping\" is not one of tcp, http"},
		{"no checks", head + oneBackend + "health: {rise: 2}\n", ":6:10: service \"web\": health needs at least one check"},
		{"bad initial health", head + oneBackend + "health: {initial: unknown, checks: [{type: tcp}]}\n", ":6:19: service \"web\": health initial \"unknown\" is not up or down"},
		{"bad when_none_healthy", head + oneBackend + "when_none_healthy: some\n", ":6:20: service \"web\": when_none_healthy \"some\" is not all or drop"},
		{"when_none_healthy contradicts", head + oneBackend + "when_none_healthy: all\nfailover: {drop_if_none_healthy: true}\n", ":6:20: service \"web\": when_none_healthy all contradicts failover.drop_if_none_healthy true"},
		{"timeout above interval", head + oneBackend + "health: {checks: [{type: tcp, interval: 1s, timeout: 2s}]}\n", ":6:54: service \"web\": check timeout 2s must be above 0 and at most the interval 1s"},
		{"bad expect", head + oneBackend + "health: {checks: [{type: http, expect: \"2xx\"}]}\n", ":6:40: service \"web\": expect \"2xx\" is not an HTTP status"},
		{"rise zero", head + oneBackend + "health: {rise: 0, checks: [{type: tcp}]}\n", ":6:16: service \"web\": rise 0 is not in 1-100"},
		{"weight header without http", head + oneBackend + "health: {weight_header: true, checks: [{type: tcp}]}\n", ":6:25: service \"web\": weight_header needs an http or https check"},
		{"exec without command", head + oneBackend + "health: {checks: [{type: exec}]}\n", ":6:20: service \"web\": an exec check needs command"},
		{"at_least too big", head + oneBackend + "health: {at_least: 3, checks: [{type: tcp}]}\n", ":6:20: service \"web\": at_least 3 is not in 0-1"},
		{"failover ratio", head + oneBackend + "failover: {ratio: 1.5}\n", ":6:19: service \"web\": failover ratio 1.5 is not in 0.0-1.0"},
		{"bad persistence on unhealthy", head + oneBackend + "persistence_on_unhealthy: sometimes\n", ":6:27: service \"web\": persistence_on_unhealthy \"sometimes\" is not one of default-for-protocol, never, always"},
		{"always with per-session", head + oneBackend + "persistence: {timeout: 5m}\npersistence_on_unhealthy: always\n", ":7:27: service \"web\": persistence_on_unhealthy \"always\" cannot be combined with per-session tracking"},
		{"drain_on_failover not a bool", head + oneBackend + "failover: {drain_on_failover: sometimes}\n", ":6:"},
		{"name with space", "service: my web\nvip: 10.0.0.50\nports: [80]\n" + oneBackend, ":1:10: service name \"my web\" must not contain spaces"},
	}
	checkBadServices(t, cases)
}

// badCase is a malformed file and the end of the error it must give,
// from the line and column on.
type badCase struct{ name, body, want string }

// checkBadServices loads each case's body as a service file: the error must
// name the file, the line and column of the culprit, and say what is wrong.
func checkBadServices(t *testing.T, cases []badCase) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := writeFile(t, t.TempDir(), "svc.yaml", c.body)
			_, err := loadServiceFiles(p)
			if err == nil {
				t.Fatalf("no error for:\n%s", c.body)
			}
			if !strings.Contains(err.Error(), p+c.want) {
				t.Errorf("error\n  %v\nwant it to contain\n  %s%s", err, p, c.want)
			}
			var e *Error
			if !errors.As(err, &e) {
				t.Errorf("error %T is not a *config.Error", err)
			}
		})
	}
}

func TestHealthAndFailover(t *testing.T) {
	p := writeFile(t, t.TempDir(), "svc.yaml", `
service: web
vip: 10.0.0.50
ports: [80]
health:
  interval: 1s
  rise: 1
  checks:
    - {type: http, port: 8080, path: /healthz, expect: "200-299"}
    - {type: tcp}
  at_least: 1
  weight_header: true
failover: {ratio: 0.5, drain_on_failover: false}
persistence_on_unhealthy: never
backends:
  - {address: 10.0.0.11}
  - {address: 10.0.0.12, failover: true, health: {fall: 1, checks: [{type: exec, command: [/bin/true]}]}}
`)
	svcs, err := loadServiceFiles(p)
	if err != nil {
		t.Fatal(err)
	}
	s := svcs[0]
	if !s.Failover.Configured || s.Failover.Ratio != 0.5 || s.Failover.DrainOnFailover {
		t.Errorf("failover: %+v", s.Failover)
	}
	if s.PersistenceOnUnhealthy != "never" || s.KeepsConnectionsOnUnhealthy() {
		t.Errorf("persistence_on_unhealthy %q keeps connections: %v", s.PersistenceOnUnhealthy, s.KeepsConnectionsOnUnhealthy())
	}
	h := s.Backends[0].Health
	if h == nil || len(h.Checks) != 2 || h.Rise != 1 || h.Fall != DefaultFall || h.AtLeast != 1 || !h.WeightHeader ||
		h.Checks[0].Interval != time.Second || h.Checks[0].Expect != [2]int{200, 299} || h.Checks[1].Port != 0 {
		t.Errorf("service health: %+v", h)
	}
	if h.StartDown {
		t.Errorf("health starts down without initial: down: %+v", h)
	}
	o := s.Backends[1].Health
	if !s.Backends[1].Failover || o == nil || len(o.Checks) != 1 || o.Checks[0].Type != "exec" || o.Fall != 1 || o.Rise != 1 {
		t.Errorf("backend override: %+v", o)
	}
}

// initial: down and when_none_healthy: drop are keepalived's behaviour as
// options: a backend counts only once its checks passed, and nothing
// healthy means no backend, without turning a failover policy on.
func TestInitialHealthAndWhenNoneHealthy(t *testing.T) {
	p := writeFile(t, t.TempDir(), "svc.yaml", `
service: web
vip: 10.0.0.50
ports: [80]
when_none_healthy: drop
health: {initial: down, checks: [{type: tcp}]}
backends:
  - {address: 10.0.0.11}
  - {address: 10.0.0.12, health: {initial: up, checks: [{type: tcp, port: 81}]}}
  - {address: 10.0.0.13, health: {fall: 1, checks: [{type: tcp, port: 82}]}}
`)
	svcs, err := loadServiceFiles(p)
	if err != nil {
		t.Fatal(err)
	}
	s := svcs[0]
	if s.Failover.Configured || !s.Failover.DropIfNoneHealthy {
		t.Errorf("when_none_healthy: drop gave %+v, want drop without a failover policy", s.Failover)
	}
	for i, want := range []bool{true, false, true} { // the third inherits the service's
		if h := s.Backends[i].Health; h == nil || h.StartDown != want {
			t.Errorf("backend %d: StartDown %v, want %v", i, h != nil && h.StartDown, want)
		}
	}
}

// A service's interface and its NAT gateway's are read as written; unset,
// both stay "" (the agent file's interface, and then the service's).
func TestServiceInterfaces(t *testing.T) {
	const head = "service: web\nvip: 10.0.0.50\nports: [80]\nforwarding: nat\nbackends:\n  - {address: 10.0.1.11}\n"
	cases := []struct {
		name, body          string
		iface, gatewayIface string
	}{
		{"unset", head, "", ""},
		{"vlan", head + "interface: eth0.20\n", "eth0.20", ""},
		{"two-armed", head + "interface: eth0\nnat: {gateway: 10.0.1.1, gateway_interface: eth1}\n", "eth0", "eth1"},
		{"gateway on the service's", head + "interface: bond0.30\nnat: {gateway: 10.0.1.1}\n", "bond0.30", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ss, err := loadServiceFiles(writeFile(t, t.TempDir(), "svc.yaml", c.body))
			if err != nil {
				t.Fatal(err)
			}
			if s := ss[0]; s.Interface != c.iface || s.GatewayInterface != c.gatewayIface {
				t.Errorf("interface %q, gateway_interface %q; want %q, %q", s.Interface, s.GatewayInterface, c.iface, c.gatewayIface)
			}
		})
	}
}

// BackendKey names a backend by its address, and its port when it has one.
func TestBackendKey(t *testing.T) {
	for _, c := range []struct {
		addr string
		port uint16
		want string
	}{
		{"10.0.0.1", 0, "web/10.0.0.1"},
		{"10.0.0.2", 8080, "web/10.0.0.2:8080"},
		{"2001:db8::1", 0, "web/2001:db8::1"},
		{"2001:db8::2", 443, "web/[2001:db8::2]:443"},
	} {
		if got := BackendKey("web", netip.MustParseAddr(c.addr), c.port); got != c.want {
			t.Errorf("%s port %d: %q, want %q", c.addr, c.port, got, c.want)
		}
	}
}
