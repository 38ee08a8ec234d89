package views

import (
	"context"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

var partsSeries = []string{"lvsd_vrrp_state", "lvsd_vrrp_master_transitions_total", "lvsd_vrrp_dropped_packets_total",
	"lvsd_config_sync_records", "lvsd_config_sync_refused", "lvsd_config_sync_conflicts"}

var (
	twoRouters = []VRRPRouterStatus{
		{Family: "ipv4", VRID: 51, State: "backup", Priority: 100, Master: "192.0.2.11", AdvertInterval: 1, BecameMaster: 2,
			Dropped: map[string]uint64{"another virtual router ID": 7}},
		{Family: "ipv6", VRID: 51, State: "master", Priority: 100, AdvertInterval: 1, BecameMaster: 1},
	}
	troubledSync = ConfigSyncStatus{Records: 4, Published: 1, Digest: "ab12",
		Refused:   map[string]string{"bad.yaml": "d1:/etc/lvsd/services.d/bad.yaml:3:10: ports: not a number"},
		Conflicts: map[string]string{"web.yaml": "a local file of this director overrides d1's publication; it is left as it is"}}
)

// TestStatusParts: the status carries what the director's parts report,
// and a copy of it.
func TestStatusParts(t *testing.T) {
	tests := []struct {
		name     string
		src      Sources
		routers  int
		withSync bool
	}{
		{name: "none"},
		{name: "vrrp", src: Sources{VRRP: func() []VRRPRouterStatus { return twoRouters }}, routers: 2},
		{name: "config sync", src: Sources{ConfigSync: func() ConfigSyncStatus { return troubledSync }}, withSync: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t)
			e.service("web", webTwo)
			v := e.agent()
			e.reconcile(v)
			st, err := NewWith(v.a, tt.src).Status(context.Background(), StatusQuery{})
			if err != nil {
				t.Fatal(err)
			}
			if len(st.VRRP) != tt.routers || (st.ConfigSync != nil) != tt.withSync {
				t.Fatalf("status has %d routers and config sync %v, want %d and %v", len(st.VRRP), st.ConfigSync, tt.routers, tt.withSync)
			}
			if tt.withSync {
				st.ConfigSync.Refused["other.yaml"] = "changed by the reader"
				if len(troubledSync.Refused) != 1 {
					t.Error("the status shares the syncer's map")
				}
			}
		})
	}
}

// TestMetricsParts: the VRRP and config sync series, with those only, pass
// promlint.
func TestMetricsParts(t *testing.T) {
	e := newEnv(t)
	e.service("web", webTwo)
	v := e.agent()
	e.reconcile(v)
	if n := testutil.CollectAndCount(NewCollector(v, "dev"), partsSeries...); n != 0 {
		t.Fatalf("without VRRP or config sync: %d of their series", n)
	}
	c := NewCollector(NewWith(v.a, Sources{VRRP: func() []VRRPRouterStatus { return twoRouters },
		ConfigSync: func() ConfigSyncStatus { return troubledSync }}), "dev")
	want := `
# HELP lvsd_vrrp_state 1 for the state the virtual router of the address family is in, 0 for the others: master (holds the VIPs), backup, initialize (serving no VIP, or stopped).
# TYPE lvsd_vrrp_state gauge
lvsd_vrrp_state{family="ipv4",state="backup",vrid="51"} 1
lvsd_vrrp_state{family="ipv4",state="initialize",vrid="51"} 0
lvsd_vrrp_state{family="ipv4",state="master",vrid="51"} 0
lvsd_vrrp_state{family="ipv6",state="backup",vrid="51"} 0
lvsd_vrrp_state{family="ipv6",state="initialize",vrid="51"} 0
lvsd_vrrp_state{family="ipv6",state="master",vrid="51"} 1
# HELP lvsd_vrrp_master_transitions_total Times the virtual router of the address family became master on this director.
# TYPE lvsd_vrrp_master_transitions_total counter
lvsd_vrrp_master_transitions_total{family="ipv4",vrid="51"} 2
lvsd_vrrp_master_transitions_total{family="ipv6",vrid="51"} 1
# HELP lvsd_vrrp_dropped_packets_total VRRP packets the virtual router dropped, by reason (another virtual router ID on the link is normal; the others point at a misconfigured peer), and advertisements of other addresses than this director's VIPs.
# TYPE lvsd_vrrp_dropped_packets_total counter
lvsd_vrrp_dropped_packets_total{family="ipv4",reason="another virtual router ID",vrid="51"} 7
# HELP lvsd_config_sync_records Files kept by the configuration sync, removals included: the same on every director once they agree.
# TYPE lvsd_config_sync_records gauge
lvsd_config_sync_records 4
# HELP lvsd_config_sync_refused Received files this director refused: they fail the check of the services directory (lvsd status names the publisher's file:line:col).
# TYPE lvsd_config_sync_refused gauge
lvsd_config_sync_refused 1
# HELP lvsd_config_sync_conflicts Files published by two directors, or received and overridden by a local file of the same name.
# TYPE lvsd_config_sync_conflicts gauge
lvsd_config_sync_conflicts 1
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(want), partsSeries...); err != nil {
		t.Fatal(err)
	}
	problems, err := testutil.CollectAndLint(c)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("lint: %s: %s", p.Metric, p.Text)
	}
}
