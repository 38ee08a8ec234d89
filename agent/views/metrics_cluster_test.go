package views

import (
	"context"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/lvsd/lvsd/agent"
	"github.com/lvsd/lvsd/cluster"
	"github.com/lvsd/lvsd/cluster/connsync"
)

type fixedView cluster.View

func (v fixedView) View(context.Context) (cluster.View, error) { return cluster.View(v), nil }

type fixedSyncStats connsync.Stats

func (s fixedSyncStats) Stats() connsync.Stats { return connsync.Stats(s) }

func (fixedSyncStats) ForgetDestinations(netip.Addr, []netip.AddrPort) {}
func (fixedSyncStats) SetServices([]connsync.Service)                  {}
func (fixedSyncStats) ReleaseVIP(netip.Addr)                           {}

// TestMetricsCluster: the cluster and connection-sync series, in a cluster
// only, pass promlint.
func TestMetricsCluster(t *testing.T) {
	e := newEnv(t)
	e.service("web", webTwo)
	a := e.agent()
	c := NewCollector(a, "dev")
	e.reconcile(a)
	names := []string{"lvsd_cluster_live_directors", "lvsd_conn_sync_records_total", "lvsd_conn_sync_anti_entropy_total", "lvsd_conn_sync_lag_seconds", "lvsd_conn_sync_pushes_total",
		"lvsd_cluster_info", "lvsd_cluster_state", "lvsd_cluster_vip_holders", "lvsd_cluster_config_drift", "lvsd_cluster_config_drift_services"}
	if n := testutil.CollectAndCount(c, names...); n != 0 {
		t.Fatalf("without a cluster: %d cluster series", n)
	}
	// The same director restarted in a cluster, with connection sync.
	a = e.agentWith(agent.Options{
		Cluster: fixedView{Live: 2, Quorum: 2, Stalls: 3, Mode: cluster.ActiveStandby, State: "standby",
			VIPs: []cluster.VIPView{{VIP: "10.0.0.50", Owner: "d2", Holders: []string{"d2"}}, {VIP: "10.0.0.51"}},
			Members: []cluster.MemberView{{Name: "d1", Self: true, Live: true},
				{Name: "d2", Live: true, Config: &cluster.ConfigView{Match: cluster.ConfigDifferent, Services: []string{"web"}, Differing: 1}},
				{Name: "d3", Live: true, Config: &cluster.ConfigView{Match: cluster.ConfigSame}},
				{Name: "d4", Live: true, Config: &cluster.ConfigView{Match: cluster.ConfigUnknown}},
				{Name: "d5", Config: &cluster.ConfigView{Match: cluster.ConfigDifferent, Differing: 3}}}},
		ConnSync: fixedSyncStats{MasterRecords: 10, SentRecords: 12, ReplayedRecords: 2, ReceivedRecords: 5,
			AppliedRecords: 5, DroppedInvalid: 1, CacheSize: 7, Pushes: 4, LastLag: 3 * time.Millisecond, MaxLag: 40 * time.Millisecond,
			ResentRecords: 1, SummariesSent: 6, SummariesReceived: 12, MissingMessages: 3, RequestsSent: 1, RequestsReceived: 2, RequestsRefused: 1}})
	e.reconcile(a)
	c = NewCollector(a, "dev")
	want := `
# HELP lvsd_cluster_info Always 1; mode is active-standby, active-active or ecmp (where every ready director holds every VIP).
# TYPE lvsd_cluster_info gauge
lvsd_cluster_info{mode="active-standby"} 1
# HELP lvsd_cluster_state 1 for the state this director is in, 0 for the others: starting (start-up hold), active (holds VIPs), standby (holds none), no-quorum (too few directors seen), leaving.
# TYPE lvsd_cluster_state gauge
lvsd_cluster_state{state="active"} 0
lvsd_cluster_state{state="leaving"} 0
lvsd_cluster_state{state="no-quorum"} 0
lvsd_cluster_state{state="standby"} 1
lvsd_cluster_state{state="starting"} 0
# HELP lvsd_cluster_vip_holders Directors that claim the VIP in their heartbeats, as this director hears them: 1 is normal (all ready directors under ecmp), 0 no owner, more split ownership.
# TYPE lvsd_cluster_vip_holders gauge
lvsd_cluster_vip_holders{vip="10.0.0.50"} 1
lvsd_cluster_vip_holders{vip="10.0.0.51"} 0
# HELP lvsd_cluster_config_drift 1 when the service configuration of the live peer director differs from this one's, 0 when it is the same; no series for a peer that sends no digest (an earlier release).
# TYPE lvsd_cluster_config_drift gauge
lvsd_cluster_config_drift{peer="d2"} 1
lvsd_cluster_config_drift{peer="d3"} 0
# HELP lvsd_cluster_config_drift_services Services defined differently by the live peer director and this one, or by one of them only, as far as compared.
# TYPE lvsd_cluster_config_drift_services gauge
lvsd_cluster_config_drift_services{peer="d2"} 1
lvsd_cluster_config_drift_services{peer="d3"} 0
# HELP lvsd_cluster_live_directors Directors this one counts for the quorum, itself included.
# TYPE lvsd_cluster_live_directors gauge
lvsd_cluster_live_directors 2
# HELP lvsd_conn_sync_lag_seconds Receive time minus the sender's send time of relay messages (includes the directors' clock offset): of the last message, and the largest seen.
# TYPE lvsd_conn_sync_lag_seconds gauge
lvsd_conn_sync_lag_seconds{which="last"} 0.003
lvsd_conn_sync_lag_seconds{which="max"} 0.04
# HELP lvsd_conn_sync_pushes_total Datagrams sent to the pusher service so that the master daemon's last record leaves at once instead of after its 2 s flush time.
# TYPE lvsd_conn_sync_pushes_total counter
lvsd_conn_sync_pushes_total 4
# HELP lvsd_conn_sync_records_total IPVS connection records by stage: read from the local master daemon, sent to the cluster (replayed: of those, from the cache; resent: of those, to a peer that lost them), received from the cluster, applied (written to the local backup daemon while it runs), and of a starting director's catch-up replays: confirmed (found in the kernel's connection table), retried (written again because the table lacked them), unconfirmed (still lacking after the retries).
# TYPE lvsd_conn_sync_records_total counter
lvsd_conn_sync_records_total{stage="applied"} 5
lvsd_conn_sync_records_total{stage="confirmed"} 0
lvsd_conn_sync_records_total{stage="read"} 10
lvsd_conn_sync_records_total{stage="received"} 5
lvsd_conn_sync_records_total{stage="replayed"} 2
lvsd_conn_sync_records_total{stage="resent"} 1
lvsd_conn_sync_records_total{stage="retried"} 0
lvsd_conn_sync_records_total{stage="sent"} 12
lvsd_conn_sync_records_total{stage="unconfirmed"} 0
# HELP lvsd_conn_sync_anti_entropy_total How the relays make up for lost messages: summaries sent and received, peers' messages found missing, requests for them sent, received and refused, and whole-cache replays to one peer that lost more than could be sent again.
# TYPE lvsd_conn_sync_anti_entropy_total counter
lvsd_conn_sync_anti_entropy_total{event="fallback_replay"} 0
lvsd_conn_sync_anti_entropy_total{event="message_missing"} 3
lvsd_conn_sync_anti_entropy_total{event="request_received"} 2
lvsd_conn_sync_anti_entropy_total{event="request_refused"} 1
lvsd_conn_sync_anti_entropy_total{event="request_sent"} 1
lvsd_conn_sync_anti_entropy_total{event="summary_received"} 12
lvsd_conn_sync_anti_entropy_total{event="summary_sent"} 6
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(want), names...); err != nil {
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
