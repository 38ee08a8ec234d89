package config

import (
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lvsd/lvsd/ipvs/spec"
)

func TestIPVSTimeouts(t *testing.T) {
	const head = "interface: eth0\nservices_dir: services.d\n"
	for _, c := range []struct {
		name, body string
		want       spec.Timeouts
	}{
		{"absent: the kernel's", head, spec.Timeouts{}},
		{"seed 000: 60 s after the last packet", head + "ipvs: {timeouts: {tcp: 60s, tcp_fin: 60s, udp: 60s}}\n",
			spec.Timeouts{TCP: time.Minute, TCPFin: time.Minute, UDP: time.Minute}},
		{"one of three", head + "ipvs:\n  timeouts:\n    tcp: 15m\n", spec.Timeouts{TCP: 15 * time.Minute}},
		{"0 keeps the kernel's", head + "ipvs: {timeouts: {tcp: 0, udp: 0s, tcp_fin: 2s}}\n", spec.Timeouts{TCPFin: 2 * time.Second}},
	} {
		t.Run(c.name, func(t *testing.T) {
			a := loadAgentText(t, c.body)
			if a.IPVS.Timeouts != c.want {
				t.Errorf("timeouts %+v, want %+v", a.IPVS.Timeouts, c.want)
			}
		})
	}
}

func loadAgentText(t *testing.T, body string) *Agent {
	t.Helper()
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "services.d"), 0o755); err != nil {
		t.Fatal(err)
	}
	a, err := LoadAgent(writeFile(t, dir, "lvsd.yaml", body))
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func TestIPVSTimeoutsRejected(t *testing.T) {
	const head = "interface: eth0\nservices_dir: services.d\n"
	for _, c := range []struct{ name, body, want string }{
		{"no unit", head + "ipvs: {timeouts: {tcp: 60}}\n",
			`lvsd.yaml:3:24: timeout tcp "60" is not a duration like 60s or 15m (0 keeps the kernel's)`},
		{"fraction of a second", head + "ipvs: {timeouts: {udp: 1500ms}}\n",
			"lvsd.yaml:3:24: timeout udp: 1.5s is not a whole number of seconds (the kernel counts seconds) (0 keeps the kernel's)"},
		{"above the kernel's limit", head + "ipvs: {timeouts: {tcp_fin: 600h}}\n",
			"lvsd.yaml:3:28: timeout tcp_fin: 600h0m0s is not in 1s-596h31m23s (0 keeps the kernel's)"},
		{"negative", head + "ipvs: {timeouts: {tcp: -1s}}\n",
			"lvsd.yaml:3:24: timeout tcp: -1s is not in 1s-596h31m23s (0 keeps the kernel's)"},
		{"unknown timeout", head + "ipvs: {timeouts: {tcpfin: 60s}}\n",
			`lvsd.yaml:3:19: unknown key "tcpfin" (did you mean tcp_fin?)`},
		{"on a real server", "role: realserver\nmetrics: {listen: off}\nipvs: {timeouts: {tcp: 60s}}\n",
			"lvsd.yaml:3:8: ipvs is for role director; a real server has no IPVS services"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := agentErrors(t, c.body); got != c.want {
				t.Errorf("got\n  %s\nwant\n  %s", got, c.want)
			}
		})
	}
}

func TestThresholdsAndSorryServer(t *testing.T) {
	body := svcHead + "sorry_server: 10.0.0.99\nbackends:\n" +
		"  - {address: 10.0.0.11, upper_threshold: 2, lower_threshold: 1}\n" +
		"  - {address: 10.0.0.12, upper_threshold: 100}\n" +
		"  - {address: 10.0.0.13}\n" +
		"---\nservice: nat\nvip: 10.0.0.51\nports: [80]\nforwarding: nat\nsorry_server: \"10.0.0.99:8080\"\nbackends: [{address: 10.0.0.11, port: 8080}]\n" +
		"---\nservice: v6\nvip: 2001:db8::50\nports: [443]\nsorry_server: \"[2001:db8::99]:443\"\nbackends: [{address: \"2001:db8::11\"}]\n"
	got, err := loadServiceFiles(writeFile(t, t.TempDir(), "svc.yaml", body))
	if err != nil {
		t.Fatal(err)
	}
	web := got[0]
	if web.SorryServer != netip.MustParseAddrPort("10.0.0.99:0") {
		t.Errorf("web sorry server %v", web.SorryServer)
	}
	for i, want := range [][2]uint32{{2, 1}, {100, 0}, {0, 0}} {
		if b := web.Backends[i]; b.UpperThreshold != want[0] || b.LowerThreshold != want[1] {
			t.Errorf("backend %s thresholds %d/%d, want %d/%d", b, b.UpperThreshold, b.LowerThreshold, want[0], want[1])
		}
	}
	if got[1].SorryServer != netip.MustParseAddrPort("10.0.0.99:8080") || got[2].SorryServer != netip.MustParseAddrPort("[2001:db8::99]:443") {
		t.Errorf("sorry servers %v, %v", got[1].SorryServer, got[2].SorryServer)
	}
}

func TestThresholdsAndSorryServerRejected(t *testing.T) {
	backend := func(extra string) string { return svcHead + "backends:\n  - {address: 10.0.0.11" + extra + "}\n" }
	sorry := func(v string) string { return svcHead + "sorry_server: " + v + "\n" + svcOne }
	for _, c := range []struct{ name, body, want string }{
		{"lower above upper", backend(", upper_threshold: 2, lower_threshold: 3"),
			`svc.yaml:5:63: service "web": backend 10.0.0.11: lower_threshold 3 is above upper_threshold 2`},
		{"lower without upper", backend(", lower_threshold: 3"),
			`svc.yaml:5:43: service "web": backend 10.0.0.11: lower_threshold needs upper_threshold (it says when a backend at its upper threshold takes new connections again)`},
		{"upper zero", backend(", upper_threshold: 0"), `svc.yaml:5:43: service "web": upper_threshold 0 is not in 1-2147483647`},
		{"upper too big", backend(", upper_threshold: 4294967296"), `svc.yaml:5:43: service "web": upper_threshold 4294967296 is not in 1-2147483647`},
		{"sorry server is a backend", sorry("10.0.0.11"),
			`svc.yaml:4:15: service "web": sorry_server 10.0.0.11 is one of the backends; it takes connections only while no backend is eligible`},
		{"sorry server not an address", sorry("sorry.example"),
			`svc.yaml:4:15: service "web": sorry_server "sorry.example" is not an address or address:port ([v6]:port)`},
		{"sorry server other family", sorry("\"2001:db8::1\""),
			`svc.yaml:4:15: service "web": sorry_server 2001:db8::1 and vip 10.0.0.50 are of different IP families`},
		{"sorry server is the vip", sorry("10.0.0.50"), `svc.yaml:4:15: service "web": sorry_server must not be the vip`},
		{"sorry server loopback", sorry("127.0.0.1"), `svc.yaml:4:15: service "web": sorry_server 127.0.0.1 must be a unicast address`},
		{"sorry server port under dr", sorry("\"10.0.0.99:8080\""),
			`svc.yaml:4:15: service "web": sorry_server 10.0.0.99:8080: forwarding dr cannot change the port (sorry_server port 8080); real servers receive the service port, so omit port`},
		{"sorry server port with two ports", "service: web\nvip: 10.0.0.50\nports: [80, 443]\nforwarding: nat\nsorry_server: \"10.0.0.99:8080\"\n" + svcOne,
			`svc.yaml:5:15: service "web": sorry_server 10.0.0.99:8080: a sorry_server port needs a service with exactly one port`},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := serviceErrors(t, c.body); got != c.want {
				t.Errorf("got\n  %s\nwant\n  %s", strings.ReplaceAll(got, "\n", "\n  "), c.want)
			}
		})
	}
}
