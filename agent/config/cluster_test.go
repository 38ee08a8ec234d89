package config

import (
	"bytes"
	"net/netip"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"
)

const testKey = "BwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwc=" // 32 bytes of 7

// writeKey writes a key file as lvsd accepts it: mode 0600.
func writeKey(t *testing.T, dir, name, body string) string {
	t.Helper()
	p := writeFile(t, dir, name, body)
	if err := os.Chmod(p, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestClusterGood(t *testing.T) {
	dir := t.TempDir()
	writeKey(t, dir, "cluster.key", "# rotated 2026-11\n"+testKey+"\n\nAAAAAAAAAAAAAAAAAAAAAA==\n")
	p := writeFile(t, dir, "lvsd.yaml", `
node: director2
interface: eth0
cluster:
  bind: 10.0.0.3
  peers: [10.0.0.2, "10.0.0.3:7946", "[fd00::4]:8000", dir5.example.com]
  key_file: cluster.key
  label: prod
  mode: active-standby
  priority: 200
  preempt: false
  quorum: 3
  heartbeat_interval: 100ms
  failure_timeout: 500ms
  rejoin_interval: 5s
  address_lifetime: 30s
  nice: -5
  conn_sync: {enabled: false, port: 9000, resync_interval: 30s, peer_conntrack_share: 40}
  allow_from: [10.0.0.0/24, 192.0.2.9, "fd00::/64"]
  rate_limit: 5000
`)
	a, err := LoadAgent(p)
	if err != nil {
		t.Fatal(err)
	}
	want := &Cluster{Bind: "10.0.0.3:7946", Peers: []string{"10.0.0.2:7946", "10.0.0.3:7946", "[fd00::4]:8000", "dir5.example.com:7946"},
		KeyFile: dir + "/cluster.key", IdentityFile: DefaultIdentityFile, Keys: [][]byte{bytes.Repeat([]byte{7}, 32), make([]byte, 16)}, Label: "prod",
		Mode: ModeActiveStandby, Priority: 200, Preempt: false, Quorum: 3, HeartbeatInterval: 100 * time.Millisecond,
		FailureTimeout: 500 * time.Millisecond, RejoinInterval: 5 * time.Second, AddressLifetime: 30 * time.Second, Nice: -5,
		ConnSync:  ConnSync{Enabled: false, Port: 9000, ResyncInterval: 30 * time.Second, PeerConntrackShare: 40},
		AllowFrom: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/24"), netip.MustParsePrefix("192.0.2.9/32"), netip.MustParsePrefix("fd00::/64")},
		RateLimit: 5000, CoordinatedChanges: CoordinatedChanges{Wait: DefaultCoordinatedWait}}
	if !reflect.DeepEqual(a.Cluster, want) {
		t.Errorf("got  %+v\nwant %+v", a.Cluster, want)
	}
}

func TestClusterDefaults(t *testing.T) {
	a, err := LoadAgent(writeFile(t, t.TempDir(), "lvsd.yaml", "interface: eth0\ncluster: {insecure: true, mode: active-active}\n"))
	if err != nil {
		t.Fatal(err)
	}
	want := &Cluster{Bind: ":7946", Insecure: true, IdentityFile: DefaultIdentityFile, Label: "lvsd", Mode: ModeActiveActive, Priority: 100, Preempt: true,
		HeartbeatInterval: 50 * time.Millisecond, FailureTimeout: 250 * time.Millisecond, RejoinInterval: 10 * time.Second,
		AddressLifetime: 10 * time.Second, Nice: -10, ConnSync: ConnSync{Enabled: true, Port: 8848, ResyncInterval: 10 * time.Second, PeerConntrackShare: 25},
		RateLimit: DefaultClusterRateLimit, CoordinatedChanges: CoordinatedChanges{Wait: DefaultCoordinatedWait}}
	if !reflect.DeepEqual(a.Cluster, want) {
		t.Errorf("got  %+v\nwant %+v", a.Cluster, want)
	}
	if a, _ := LoadAgent(writeFile(t, t.TempDir(), "lvsd.yaml", "interface: eth0\n")); a.Cluster != nil {
		t.Errorf("no cluster block gave %+v", a.Cluster)
	}
}

// Each case is a malformed cluster block; the error names the line and
// column of the culprit and says what is wrong.
func TestClusterBad(t *testing.T) {
	const head = "interface: eth0\ncluster:\n"
	const ins = "  insecure: true\n"
	cases := []struct{ name, body, want string }{
		{"no key", head + "  peers: [10.0.0.2]\n", ":3:3: cluster traffic is encrypted and authenticated: key_file is required"},
		{"missing key file", head + "  key_file: nope.key\n", ":3:13: cluster key_file |nope.key does not exist"},
		{"bad key", head + "  key_file: bad.key\n", ":3:13: |bad.key:2: the key is 5 bytes, want 16, 24 or 32"},
		{"key not base64", head + "  key_file: garbage.key\n", ":3:13: |garbage.key:1: the key is not standard base64"},
		{"empty key file", head + "  key_file: empty.key\n", ":3:13: |empty.key holds no key"},
		{"key and insecure", head + "  key_file: good.key\n" + ins, ":4:13: insecure: true turns encryption off, but a key_file is given"},
		{"unknown key", head + ins + "  peer: [10.0.0.2]\n", ":4:3: unknown key \"peer\" (did you mean peers?)"},
		{"bad mode", head + ins + "  mode: active-passive\n", ":4:9: mode \"active-passive\" is not one of active-standby, active-active"},
		{"bad peer", head + ins + "  peers: [10.0.0.2, \"10.0.0.3:http\"]\n", ":4:21: peer \"10.0.0.3:http\" is not a host"},
		{"peer port range", head + ins + "  peers: [\"10.0.0.3:70000\"]\n", ":4:11: peer \"10.0.0.3:70000\" is not a host"},
		{"duplicate peer", head + ins + "  peers: [10.0.0.2, \"10.0.0.2:7946\"]\n", ":4:21: peer 10.0.0.2:7946 is listed twice"},
		{"bind hostname", head + ins + "  bind: director.example.com\n", ":4:9: bind \"director.example.com\" is not an IP address"},
		{"advertise any", head + ins + "  advertise: 0.0.0.0\n", ":4:14: advertise \"0.0.0.0\" is not an IP address"},
		{"priority range", head + ins + "  priority: 256\n", ":4:13: priority 256 is not in 1-255"},
		{"priority active-active", head + ins + "  mode: active-active\n  priority: 10\n", ":5:13: priority is for mode active-standby"},
		{"quorum too big", head + ins + "  peers: [10.0.0.2, 10.0.0.3]\n  quorum: 4\n", ":5:11: quorum 4 is not in 1-3"},
		{"quorum zero", head + ins + "  quorum: 0\n", ":4:11: quorum 0 is not in 1-1"},
		{"heartbeat", head + ins + "  heartbeat_interval: 5ms\n", ":4:23: heartbeat_interval \"5ms\" is not a duration from 10ms to 1s"},
		{"timeout too short", head + ins + "  failure_timeout: 100ms\n", ":4:20: failure_timeout 100ms is shorter than 3 heartbeat intervals (150ms)"},
		{"lifetime", head + ins + "  address_lifetime: 1s\n", ":4:21: address_lifetime \"1s\" is not a duration from 2s to 24h0m0s"},
		{"nice", head + ins + "  nice: -21\n", ":4:9: nice -21 is not in -20-19"},
		{"label", head + ins + "  label: \"caf\u00e9\"\n", ":4:10: label \"caf\u00e9\" is not up to 64 printable ASCII"},
		{"preempt type", head + ins + "  preempt: sometimes\n", ":4:12: preempt: want true or false, not \"sometimes\""},
		{"sync port", head + ins + "  conn_sync: {port: 65535}\n", ":4:21: port 65535 is not in 1-65533 (connection sync also uses the next two ports)"},
		{"resync interval", head + ins + "  conn_sync:\n    resync_interval: 10ms\n", ":5:22: conn_sync.resync_interval \"10ms\" is not a duration from 1s to 1h0m0s"},
		{"peer conntrack share", head + ins + "  conn_sync: {peer_conntrack_share: 0}\n", ":4:37: peer_conntrack_share 0 is not in 1-100"},
		{"peer conntrack share percent", head + ins + "  conn_sync: {peer_conntrack_share: 25%}\n", ":4:37: peer_conntrack_share: want a whole number (1-100), not \"25%\""},
		{"sync unknown key", head + ins + "  conn_sync: {enable: true}\n", ":4:15: unknown key \"enable\" (did you mean enabled?)"},
		{"allow_from garbage", head + ins + "  allow_from: [10.0.0.0/24, everyone]\n", ":4:29: allow_from \"everyone\" is not an address or a prefix"},
		{"allow_from host bits", head + ins + "  allow_from: [10.0.0.1/24]\n", ":4:16: allow_from 10.0.0.1/24 has host bits set (did you mean 10.0.0.0/24?)"},
		{"allow_from empty", head + ins + "  allow_from: []\n", ":4:15: allow_from is empty: no director could reach this one"},
		{"rate_limit negative", head + ins + "  rate_limit: -1\n", ":4:15: rate_limit -1 is not in 0-10000000"},
		{"on a real server", "role: realserver\ncluster: {insecure: true}\n", ":2:11: cluster is only for role director"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			writeKey(t, dir, "bad.key", "# comment\naGVsbG8=\n")
			writeKey(t, dir, "garbage.key", "not base64!\n")
			writeKey(t, dir, "empty.key", "# nothing\n")
			writeKey(t, dir, "good.key", testKey+"\n")
			_, err := LoadAgent(writeFile(t, dir, "lvsd.yaml", c.body))
			if err == nil {
				t.Fatalf("no error for:\n%s", c.body)
			}
			// "|" separates what follows the file name from what comes
			// later (after the key file's own path).
			at, rest, _ := strings.Cut(c.want, "|")
			if !strings.Contains(err.Error(), "lvsd.yaml"+at) || !strings.Contains(err.Error(), rest) {
				t.Errorf("error %q does not contain %q and %q", err, "lvsd.yaml"+at, rest)
			}
		})
	}
}

// Under ECMP the cluster's failure detection moves no traffic (BFD does):
// slower heartbeats by default, five to a failure timeout when only that
// is set; active-standby keeps its fast defaults.
func TestClusterTimingDefaultsByMode(t *testing.T) {
	const bgp = "bgp: {asn: 65001, peers: [{address: 10.0.0.10, asn: 65000}]}\n"
	for _, c := range []struct {
		cluster            string
		heartbeat, failure time.Duration
	}{
		{"{insecure: true}", 50 * time.Millisecond, 250 * time.Millisecond},
		{"{insecure: true, mode: ecmp}", 200 * time.Millisecond, time.Second},
		{"{insecure: true, mode: ecmp, failure_timeout: 500ms}", 100 * time.Millisecond, 500 * time.Millisecond},
		{"{insecure: true, mode: ecmp, failure_timeout: 30ms}", 10 * time.Millisecond, 30 * time.Millisecond},
		{"{insecure: true, mode: ecmp, heartbeat_interval: 50ms}", 50 * time.Millisecond, time.Second},
	} {
		a, err := LoadAgent(writeFile(t, t.TempDir(), "lvsd.yaml", "interface: eth0\ncluster: "+c.cluster+"\n"+bgp))
		if err != nil {
			t.Errorf("%s: %v", c.cluster, err)
			continue
		}
		if got := a.Cluster; got.HeartbeatInterval != c.heartbeat || got.FailureTimeout != c.failure {
			t.Errorf("%s: heartbeat %v, failure timeout %v; want %v, %v", c.cluster, got.HeartbeatInterval, got.FailureTimeout, c.heartbeat, c.failure)
		}
	}
}

func TestClusterWarnsOfTheDefaultBind(t *testing.T) {
	for _, c := range []struct {
		bind string
		want int
	}{{"", 1}, {"  bind: 10.0.0.3\n", 0}} {
		a, err := LoadAgent(writeFile(t, t.TempDir(), "lvsd.yaml", "interface: eth0\ncluster:\n  insecure: true\n"+c.bind))
		if err != nil {
			t.Fatal(err)
		}
		w := a.Warnings()
		if len(w) != c.want || c.want > 0 && !strings.Contains(w[0], "set cluster.bind") {
			t.Errorf("bind %q: warnings %q, want %d saying what to set", c.bind, w, c.want)
		}
	}
}

func TestClusterSources(t *testing.T) {
	pp := netip.MustParsePrefix
	cases := []struct {
		name string
		c    Cluster
		want []netip.Prefix
	}{
		{"allow_from wins", Cluster{AllowFrom: []netip.Prefix{pp("10.0.0.0/8")}, Admitted: []netip.Prefix{pp("10.0.0.2/32")}}, []netip.Prefix{pp("10.0.0.0/8")}},
		{"found on the host", Cluster{Admitted: []netip.Prefix{pp("10.0.0.0/24")}, Peers: []string{"10.0.0.2:7946"}}, []netip.Prefix{pp("10.0.0.0/24")}},
		{"peers given as addresses", Cluster{Peers: []string{"10.0.0.2:7946", "[fd00::4]:8000", "dir5.example.com:7946"}},
			[]netip.Prefix{pp("10.0.0.2/32"), pp("fd00::4/128")}},
	}
	for _, c := range cases {
		if got := c.c.Sources(); !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s: Sources() = %v, want %v", c.name, got, c.want)
		}
	}
}
