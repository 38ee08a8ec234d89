package agent

import (
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/lvsd/lvsd/agent/planner"
	"github.com/lvsd/lvsd/ipvs/l4"

	"github.com/lvsd/lvsd/agent/config"
)

// loadOne loads an agent configuration with one service file.
func loadOne(t *testing.T, yaml string) *LoadedConfig {
	t.Helper()
	e := newEnv(t)
	e.service("svc", yaml)
	cfg, err := LoadConfig(e.dir + "/lvsd.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func serviceStrings(d planner.Desired) []string {
	var out []string
	for _, vs := range d.Services {
		line := vs.Service.String()
		for _, dst := range vs.Destinations {
			line += " | " + dst.Key().String() + " w" + strconv.Itoa(int(dst.Weight)) + " " + vs.Kernel(dst).Method()
		}
		out = append(out, line)
	}
	return out
}

func TestBuild(t *testing.T) {
	mark := planner.FirewallMark("web")
	fw := fmt.Sprintf("fwmark:%d/ipv4", mark)
	cases := []struct {
		name     string
		yaml     string
		services []string
		nft      []string // substrings of the rendered nft ruleset
		fwd, ct  bool
	}{
		{
			name:     "dr two ports, 5-tuple affinity",
			yaml:     "service: web\nvip: 10.0.0.50\nports: [443, 80]\nbackends: [{address: 10.0.0.12, weight: 2}, {address: 10.0.0.11}]\n",
			services: []string{"tcp:10.0.0.50:80 mh flags=mh-fallback,mh-port | 10.0.0.11:80 w1 route | 10.0.0.12:80 w2 route", "tcp:10.0.0.50:443 mh flags=mh-fallback,mh-port | 10.0.0.11:443 w1 route | 10.0.0.12:443 w2 route"},
		},
		{
			name:     "nat client-ip affinity, backend port",
			yaml:     "service: web\nvip: 10.0.0.50\nprotocol: udp\nports: [53]\nforwarding: nat\naffinity: client-ip\nbackends: [{address: 10.0.0.11, port: 5353}]\n",
			services: []string{"udp:10.0.0.50:53 mh flags=mh-fallback | 10.0.0.11:5353 w1 masq"},
			fwd:      true,
		},
		{
			name:     "port range via fwmark",
			yaml:     "service: web\nvip: 10.0.0.50\nports: [\"8000-8010\"]\nbackends: [{address: 10.0.0.11}]\n",
			services: []string{fw + " mh flags=mh-fallback,mh-port | 10.0.0.11:0 w1 route"},
			nft:      []string{"ip daddr 10.0.0.50", "8000-8010", "meta mark set " + hex(mark)},
		},
		{
			name:     "any protocol, all ports",
			yaml:     "service: web\nvip: 10.0.0.50\nprotocol: any\nports: [all]\naffinity: client-ip\nbackends: [{address: 10.0.0.11}]\n",
			services: []string{fw + " mh flags=mh-fallback | 10.0.0.11:0 w1 route"},
			nft:      []string{"meta mark set " + hex(mark)},
		},
		{
			name:     "fullnat with persistence",
			yaml:     "service: web\nvip: 10.0.0.50\nports: [80]\nforwarding: fullnat\nfullnat: {source_addresses: [10.0.0.201, 10.0.0.200]}\npersistence: {timeout: 10m, netmask: 24}\nbackends: [{address: 10.0.0.11}]\n",
			services: []string{"tcp:10.0.0.50:80 mh flags=persistent,mh-fallback,mh-port persistent=600s/24 | 10.0.0.11:80 w1 masq"},
			nft:      []string{"10.0.0.50 . tcp . 80 : " + hex(mark), hex(mark) + " : goto snat_0", "snat to 10.0.0.200/31"},
			fwd:      true, ct: true,
		},
		{
			name: "steering: parent by address, child by fwmark",
			yaml: "service: parent\nvip: 10.0.0.50\nports: [80]\nbackends: [{address: 10.0.0.11}]\n---\n" +
				"service: web\nvip: 10.0.0.50\nports: [80]\nsource_ranges: [10.0.0.0/25]\nbackends: [{address: 10.0.0.12}]\n",
			services: []string{"tcp:10.0.0.50:80 mh flags=mh-fallback,mh-port | 10.0.0.11:80 w1 route", fw + " mh flags=mh-fallback,mh-port | 10.0.0.12:0 w1 route"},
			nft:      []string{"ip saddr 10.0.0.0/25", "meta mark set " + hex(mark)},
		},
		{
			name:     "tunnel, IPIP by default, no forwarding sysctls",
			yaml:     "service: web\nvip: 10.0.0.50\nports: [80]\nforwarding: tunnel\nbackends: [{address: 10.0.1.11}]\n",
			services: []string{"tcp:10.0.0.50:80 mh flags=mh-fallback,mh-port | 10.0.1.11:80 w1 tunnel"},
		},
		{
			name:     "tunnel gue with checksum",
			yaml:     "service: web\nvip: 10.0.0.50\nports: [80]\nforwarding: tunnel\ntunnel: {encap: gue, port: 6080, checksum: checksum}\nbackends: [{address: 10.0.1.11}]\n",
			services: []string{"tcp:10.0.0.50:80 mh flags=mh-fallback,mh-port | 10.0.1.11:80 w1 tunnel/gue:6080+csum"},
		},
		{
			name:     "tunnel IPv6-in-IPv6",
			yaml:     "service: web\nvip: \"fd00::50\"\nports: [80]\nforwarding: tunnel\nbackends: [{address: \"fd01::11\"}]\n",
			services: []string{"tcp:[fd00::50]:80 mh flags=mh-fallback,mh-port | [fd01::11]:80 w1 tunnel"},
		},
		{
			name:     "tunnel gre, port range",
			yaml:     "service: web\nvip: 10.0.0.50\nports: [\"8000-8010\"]\nforwarding: tunnel\ntunnel: {encap: gre}\nbackends: [{address: 10.0.1.11}]\n",
			services: []string{fw + " mh flags=mh-fallback,mh-port | 10.0.1.11:0 w1 tunnel/gre"},
			nft:      []string{"meta mark set " + hex(mark)},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d := loadOne(t, c.yaml).Desired
			if got := serviceStrings(d); !slices.Equal(got, c.services) {
				t.Errorf("services:\n got %q\nwant %q", got, c.services)
			}
			rules := d.NAT.String()
			for _, want := range c.nft {
				if !strings.Contains(rules, want) {
					t.Errorf("nft ruleset lacks %q:\n%s", want, rules)
				}
			}
			if len(c.nft) == 0 && !d.NAT.Empty() {
				t.Errorf("unexpected nft rules:\n%s", rules)
			}
			if fwd, ct := d.Sysctls["net/ipv4/ip_forward"] == "1", d.Sysctls["net/ipv4/vs/conntrack"] == "1"; fwd != c.fwd || ct != c.ct {
				t.Errorf("forward=%v conntrack=%v, want %v %v", fwd, ct, c.fwd, c.ct)
			}
		})
	}
}

func hex(v uint32) string { return fmt.Sprintf("%#x", v) }

func TestFullNATReconcileAppliesTablesOnce(t *testing.T) {
	e := newEnv(t)
	e.service("web", "service: web\nvip: 10.0.0.50\nports: [80]\nforwarding: fullnat\nfullnat: {source_addresses: [10.0.0.200]}\nbackends: [{address: 10.0.0.11}]\n")
	a := e.agent()
	e.reconcile(a)
	if _, ok := e.nat.Current(); !ok {
		t.Fatal("no nft tables after the first reconcile")
	}
	e.reconcile(a)
	if applied := e.nat.Applied(); len(applied) != 1 {
		t.Fatalf("nft tables written %d times, want 1", len(applied))
	}
	v := e.sysctls.Values()
	if v["net/ipv4/vs/conntrack"] != "1" || v["net/ipv4/ip_forward"] != "1" || v["net/ipv6/conf/all/forwarding"] != "0" ||
		v["net/ipv4/conf/eth0/send_redirects"] != "0" || v["net/ipv4/conf/all/send_redirects"] != "0" {
		t.Fatalf("sysctls: %q", v)
	}
	// The service goes away: tables are removed once nothing needs them.
	e.service("web", webTwo)
	e.reload(a)
	e.reconcile(a)
	if _, removes := e.nat.Calls(); removes != 1 {
		t.Fatalf("nft tables removed %d times, want 1", removes)
	}
}

// A cluster with connection sync guards the sync daemons' ports on lo;
// without conn_sync there is no such rule.
func TestBuildSyncGuard(t *testing.T) {
	svc := config.Service{Name: "web", VIP: netip.MustParseAddr("10.0.0.50"), Protocol: "tcp",
		Ports: []l4.PortRange{{From: 80, To: 80}}, Forwarding: config.DR, Scheduler: "mh"}
	for _, enabled := range []bool{true, false} {
		a := &config.Agent{Interface: "eth0", Cluster: &config.Cluster{ConnSync: config.ConnSync{Enabled: enabled, Port: 9000}}}
		d, err := planner.Build(a, []*config.Service{&svc})
		if err != nil {
			t.Fatal(err)
		}
		rule := `oifname "lo" ip daddr 224.0.0.81 udp dport 9000-9001 meta skuid != 0 drop`
		if got := strings.Contains(d.NAT.String(), rule); got != enabled {
			t.Errorf("conn_sync %v: guard rule present = %v in:\n%s", enabled, got, d.NAT)
		}
	}
}

// IPv6 has no send_redirects sysctl: a director forwarding IPv6 (NAT)
// drops the ICMPv6 redirects it would send; a DR-only one has no such rule.
func TestBuildDropsIPv6Redirects(t *testing.T) {
	for fwd, want := range map[config.Forwarding]bool{config.NAT: true, config.DR: false} {
		svc := config.Service{Name: "web6", VIP: netip.MustParseAddr("fd00::60"), Protocol: "tcp",
			Ports: []l4.PortRange{{From: 80, To: 80}}, Forwarding: fwd, Scheduler: "mh"}
		d, err := planner.Build(&config.Agent{Interface: "eth0"}, []*config.Service{&svc})
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.Contains(d.NAT.String(), "icmpv6 type nd-redirect drop"); got != want {
			t.Errorf("%s: redirect rule present = %v in:\n%s", fwd, got, d.NAT)
		}
	}
}
