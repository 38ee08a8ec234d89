package config

import (
	"net/netip"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestRealServerGood(t *testing.T) {
	dir := t.TempDir()
	p := writeFile(t, dir, "lvsd.yaml", `
role: realserver
realserver:
  vips: [203.0.113.10, "2001:db8::10", "::ffff:198.51.100.7"]
  arp_interfaces: [eth0, all, bond0.100]
  weight: 1000
  health:
    listen: "10.0.0.11:9000"
    path: /lb/weight
    checks:
      - {address: "127.0.0.1:80"}
      - {type: tcp, address: "[::1]:443", timeout: 250ms}
`)
	a, err := LoadAgent(p)
	if err != nil {
		t.Fatal(err)
	}
	want := RealServer{
		VIPs: []netip.Addr{netip.MustParseAddr("203.0.113.10"), netip.MustParseAddr("2001:db8::10"),
			netip.MustParseAddr("198.51.100.7")},
		ARPInterfaces: []string{"eth0", "bond0.100"}, // "all" is implied
		Weight:        1000,
		Health: RealServerHealth{Listen: "10.0.0.11:9000", Path: "/lb/weight", Checks: []LocalCheck{
			{Type: "tcp", Address: "127.0.0.1:80", Timeout: time.Second},
			{Type: "tcp", Address: "[::1]:443", Timeout: 250 * time.Millisecond},
		}},
	}
	if !reflect.DeepEqual(a.RealServer, want) {
		t.Errorf("got  %+v\nwant %+v", a.RealServer, want)
	}
}

func TestRealServerDefaults(t *testing.T) {
	for name, body := range map[string]string{
		"no block":    "role: realserver\n",
		"empty block": "role: realserver\nrealserver: {}\n",
	} {
		t.Run(name, func(t *testing.T) {
			a, err := LoadAgent(writeFile(t, t.TempDir(), "lvsd.yaml", body))
			if err != nil {
				t.Fatal(err)
			}
			want := RealServer{Weight: 1, Health: RealServerHealth{Listen: ":9611", Path: "/healthz"}}
			if !reflect.DeepEqual(a.RealServer, want) {
				t.Errorf("got %+v, want %+v", a.RealServer, want)
			}
		})
	}
	a, err := LoadAgent(writeFile(t, t.TempDir(), "lvsd.yaml", "role: realserver\nrealserver: {health: {listen: \"off\"}, weight: 0}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if a.RealServer.Health.Listen != "" || a.RealServer.Weight != 0 {
		t.Errorf("listen off / weight 0 not kept: %+v", a.RealServer)
	}
}

// Each case is a malformed agent file; the error names the line and column
// of the culprit and says what is wrong.
func TestRealServerBad(t *testing.T) {
	const head = "role: realserver\nrealserver:\n"
	cases := []badCase{
		{"unknown key", head + "  vip: [10.0.0.50]\n", ":3:3: unknown key \"vip\" (did you mean vips?)"},
		{"bad vip", head + "  vips: [10.0.0.50, 10.0.0.500]\n", ":3:21: vip \"10.0.0.500\" is not an IP address"},
		{"loopback vip", head + "  vips: [127.0.0.2]\n", ":3:10: vip 127.0.0.2 is not a unicast address"},
		{"multicast vip", head + "  vips: [\"ff02::1\"]\n", ":3:10: vip ff02::1 is not a unicast address"},
		{"link-local vip", head + "  vips: [\"fe80::1\"]\n", ":3:10: vip fe80::1 is not a unicast address"},
		{"zone", head + "  vips: [\"fd00::1%eth0\"]\n", ":3:10: vip \"fd00::1%eth0\" is not an IP address"},
		{"duplicate vip", head + "  vips: [10.0.0.50, \"::ffff:10.0.0.50\"]\n", ":3:21: vip 10.0.0.50 is listed twice"},
		{"vips not a list", head + "  vips: 10.0.0.50\n", ":3:9: "},
		{"lo", head + "  arp_interfaces: [eth0, lo]\n", ":3:26: lo holds the VIPs"},
		{"default", head + "  arp_interfaces: [default]\n", ":3:20: \"default\" only seeds interfaces"},
		{"bad interface", head + "  arp_interfaces: [\"eth0/1\"]\n", ":3:20: \"eth0/1\" is not an interface name"},
		{"long interface", head + "  arp_interfaces: [abcdefghijklmnop]\n", ":3:20: \"abcdefghijklmnop\" is not an interface name"},
		{"duplicate interface", head + "  arp_interfaces: [eth0, eth0]\n", ":3:26: interface eth0 is listed twice"},
		{"weight too big", head + "  weight: 1001\n", ":3:11: weight 1001 is not in 0-1000"},
		{"negative weight", head + "  weight: -1\n", ":3:11: weight -1 is not in 0-1000"},
		{"weight not a number", head + "  weight: heavy\n", ":3:11: weight: want a whole number (0-1000), not \"heavy\""},
		{"bad listen", head + "  health: {listen: \"8080\"}\n", ":3:20: health listen \"8080\" is not"},
		{"listen hostname", head + "  health: {listen: \"localhost:8080\"}\n", ":3:20: health listen \"localhost:8080\""},
		{"bad path", head + "  health: {path: healthz}\n", ":3:18: health path \"healthz\" is not an URL path"},
		{"check type", head + "  health:\n    checks: [{type: http, address: \"127.0.0.1:80\"}]\n", ":4:21: check type \"http\" is not tcp"},
		{"check address", head + "  health:\n    checks: [{address: \"localhost:80\"}]\n", ":4:24: check address \"localhost:80\" is not an IP address and port"},
		{"check no port", head + "  health:\n    checks: [{address: \"127.0.0.1\"}]\n", ":4:24: check address \"127.0.0.1\""},
		{"check timeout", head + "  health:\n    checks: [{address: \"127.0.0.1:80\", timeout: 1m}]\n", ":4:49: check timeout \"1m\" is not a duration"},
		{"block on a director", "interface: eth0\nrealserver: {vips: [10.0.0.50]}\n", ":2:14: realserver is only for role realserver"},
		{"interface on a real server", "role: realserver\ninterface: eth0\n", ":2:12: interface is for role director"},
	}
	checkBadAgents(t, cases)
}

// checkBadAgents loads each case's body as an agent file; the error must
// contain the file name followed by want.
func checkBadAgents(t *testing.T, cases []badCase) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := LoadAgent(writeFile(t, t.TempDir(), "lvsd.yaml", c.body))
			if err == nil {
				t.Fatalf("no error for:\n%s", c.body)
			}
			if !strings.Contains(err.Error(), "lvsd.yaml"+c.want) {
				t.Errorf("error %q does not contain %q", err, "lvsd.yaml"+c.want)
			}
		})
	}
}

// Every problem is reported at once, so one `lvsd check` shows them all.
func TestRealServerAllErrors(t *testing.T) {
	body := "role: realserver\nrealserver:\n  vips: [bad]\n  weight: 5000\n  arp_interfaces: [lo]\n"
	_, err := LoadAgent(writeFile(t, t.TempDir(), "lvsd.yaml", body))
	var l List
	if err == nil || !asList(err, &l) || len(l) != 3 {
		t.Fatalf("want 3 errors, got %v", err)
	}
}

func asList(err error, l *List) bool {
	v, ok := err.(List)
	*l = v
	return ok
}
