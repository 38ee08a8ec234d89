package agent

import (
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/lvsd/lvsd/agent/planner"
	"github.com/lvsd/lvsd/ipvs/l4"

	"github.com/lvsd/lvsd/agent/config"
	"github.com/lvsd/lvsd/nat"
)

// FULLNAT under ECMP: each director translates to its own addresses,
// every director's are groups held by their home and guarded, the VIP's
// announcement waits for this director's own, window tracking is off;
// and what cannot work is refused with the file and line.
func TestBuildFullNATUnderECMP(t *testing.T) {
	mp := netip.MustParseAddr
	ecmp := func(syncOn bool) *config.Agent {
		return &config.Agent{Node: "d1", Interface: "eth0", BGP: &config.BGP{ASN: 65001},
			Cluster: &config.Cluster{Mode: config.ModeECMP, ConnSync: config.ConnSync{Enabled: syncOn, Port: 8848}}}
	}
	service := func(fwd config.Forwarding, per map[string][]netip.Addr) *config.Service {
		return &config.Service{Name: "web", File: "web.yaml", Line: 1, VIP: mp("192.0.2.10"), Protocol: "tcp",
			Ports: []l4.PortRange{{From: 80, To: 80}}, Forwarding: fwd, Scheduler: "mh", SNATByDirector: per,
			Backends: []config.Backend{{Addr: mp("10.0.0.11"), Weight: 1}}}
	}
	both := map[string][]netip.Addr{"d1": {mp("10.0.0.201")}, "d2": {mp("10.0.0.202"), mp("10.0.0.203")}}

	d, err := planner.Build(ecmp(true), []*config.Service{service(config.FullNAT, both)})
	if err != nil {
		t.Fatal(err)
	}
	rules := d.NAT.String()
	for _, want := range []string{"snat to 10.0.0.201 persistent", "ip daddr 10.0.0.201-10.0.0.203 "} {
		if !strings.Contains(rules, want) {
			t.Errorf("rules lack %q:\n%s", want, rules)
		}
	}
	if strings.Contains(rules, "snat to 10.0.0.202") {
		t.Errorf("this director translates to another's addresses:\n%s", rules)
	}
	host := func(a string) netip.Prefix { return netip.PrefixFrom(mp(a), 32) }
	want := []planner.VIPAddresses{
		{VIP: mp("10.0.0.201"), Addresses: []netip.Prefix{host("10.0.0.201")}, Home: "d1"},
		{VIP: mp("10.0.0.202"), Addresses: []netip.Prefix{host("10.0.0.202"), host("10.0.0.203")}, Home: "d2"},
		{VIP: mp("192.0.2.10"), Addresses: []netip.Prefix{host("192.0.2.10")}, Needs: []netip.Addr{mp("10.0.0.201")}},
	}
	if !slices.EqualFunc(d.VIPs, want, func(a, b planner.VIPAddresses) bool {
		return a.VIP == b.VIP && a.Home == b.Home && slices.Equal(a.Addresses, b.Addresses) && slices.Equal(a.Needs, b.Needs)
	}) {
		t.Errorf("VIPs %+v\nwant %+v", d.VIPs, want)
	}
	mark := planner.FirewallMark("web")
	if r := d.PeerSNAT[mark]; len(r) != 2 || r["d2"] != (planner.SNATRange{From: mp("10.0.0.202"), To: mp("10.0.0.203")}) {
		t.Errorf("PeerSNAT %v", d.PeerSNAT)
	}
	if d.Sysctls[nat.SysctlTCPBeLiberal] != "1" {
		t.Errorf("sysctls %v lack %s", d.Sysctls, nat.SysctlTCPBeLiberal)
	}

	for _, tc := range []struct {
		name  string
		agent *config.Agent
		svc   *config.Service
		want  string
	}{
		{"no per_director", ecmp(true), service(config.FullNAT, nil), "web.yaml:1: service \"web\": forwarding fullnat with cluster mode ecmp needs fullnat.per_director"},
		{"not this director", ecmp(true), service(config.FullNAT, map[string][]netip.Addr{"d2": {mp("10.0.0.202")}}), "fullnat.per_director has no addresses for this director (node \"d1\")"},
		{"no conn_sync", ecmp(false), service(config.FullNAT, both), "forwarding fullnat with cluster mode ecmp needs cluster.conn_sync"},
		{"nat", ecmp(true), service(config.NAT, nil), "forwarding nat does not work with cluster mode ecmp"},
		{"per_director without ecmp", &config.Agent{Node: "d1", Interface: "eth0"}, service(config.FullNAT, both), "fullnat.per_director is for cluster mode ecmp"},
	} {
		if _, err := planner.Build(tc.agent, []*config.Service{tc.svc}); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one with %q", tc.name, err, tc.want)
		}
	}
}

// Window tracking is off wherever a FULLNAT connection can come back to a
// director after another carried it: in any cluster, not alone.
func TestBuildFullNATWindowTracking(t *testing.T) {
	mp := netip.MustParseAddr
	service := func(fwd config.Forwarding) *config.Service {
		s := &config.Service{Name: "web", File: "web.yaml", Line: 1, VIP: mp("192.0.2.10"), Protocol: "tcp",
			Ports: []l4.PortRange{{From: 80, To: 80}}, Forwarding: fwd, Scheduler: "mh",
			Backends: []config.Backend{{Addr: mp("10.0.0.11"), Weight: 1}}}
		if fwd == config.FullNAT {
			s.SNATAddresses = []netip.Addr{mp("10.0.0.201")}
		}
		return s
	}
	cluster := &config.Cluster{Mode: config.ModeActiveStandby, ConnSync: config.ConnSync{Enabled: true, Port: 8848}}
	for _, tc := range []struct {
		name    string
		cluster *config.Cluster
		fwd     config.Forwarding
		want    string
	}{
		{"active-standby fullnat", cluster, config.FullNAT, "1"},
		{"alone fullnat", nil, config.FullNAT, ""},
		{"active-standby nat", cluster, config.NAT, ""},
		{"active-standby dr", cluster, config.DR, ""},
	} {
		d, err := planner.Build(&config.Agent{Node: "d1", Interface: "eth0", Cluster: tc.cluster}, []*config.Service{service(tc.fwd)})
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if got := d.Sysctls[nat.SysctlTCPBeLiberal]; got != tc.want {
			t.Errorf("%s: %s = %q, want %q", tc.name, nat.SysctlTCPBeLiberal, got, tc.want)
		}
	}
}
