package views

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/lvsd/lvsd/agent"
	"github.com/lvsd/lvsd/cluster"
	"github.com/lvsd/lvsd/cluster/connsync"
)

// Metrics of the director cluster and its connection sync, exported only
// in a cluster (docs/operations.md).
var (
	descClusterLive = desc("cluster_live_directors", "Directors this one counts for the quorum, itself included.")
	descQuorum      = desc("cluster_quorum", "Directors a director must count to hold any VIP.")
	descStalls      = desc("cluster_scheduling_stalls_total", "Times this process was not scheduled for long enough "+
		"to postpone failure detection (a loaded or paused host).")
	descRefused = desc("cluster_port_refused_total", "What the cluster port refused: packets that failed "+
		"authentication, streams closed unread (too many at a time, silent, or too long).", "what")
	descSyncRecords = desc("conn_sync_records_total", "IPVS connection records by stage: read from the local "+
		"master daemon, sent to the cluster (replayed: of those, from the cache; resent: of those, to a peer that lost them), received from the cluster, "+
		"applied (written to the local backup daemon while it runs), and of a starting director's catch-up replays: confirmed "+
		"(found in the kernel's connection table), retried (written again because the table lacked them), unconfirmed "+
		"(still lacking after the retries).", "stage")
	descHeartbeatsRefused = desc("cluster_heartbeats_refused_total", "Heartbeats refused before any use, by reason: "+
		"an incarnation far in the future, and with cluster.directors unsigned, an unknown name or a bad signature.", "reason")
	descSyncRefused = desc("conn_sync_refused_total", "Relay messages or records refused by the checks of who may send "+
		"what: replayed, too old, from the future, unproven (not signed by the director they name), for a service or "+
		"real server not configured here, or from a director that does not hold the VIP.", "reason")
	descSyncDropped = desc("conn_sync_dropped_total", "Sync datagrams, messages or records dropped, by reason.",
		"reason")
	descSyncAntiEntropy = desc("conn_sync_anti_entropy_total", "How the relays make up for lost messages: summaries "+
		"sent and received, peers' messages found missing, requests for them sent, received and refused, and "+
		"whole-cache replays to one peer that lost more than could be sent again.", "event")
	descSyncCache  = desc("conn_sync_cache_entries", "Connections cached for replay to directors that join.")
	descSyncPushes = desc("conn_sync_pushes_total", "Datagrams sent to the pusher service so that the master "+
		"daemon's last record leaves at once instead of after its 2 s flush time.")
	descPeerFlows = desc("conn_sync_peer_conntrack_total", "Conntrack entries of other directors' FULLNAT "+
		"connections under ECMP, by result: created, existing (found already), refreshed (of those, given the "+
		"record's timeout), replaced (of those, another connection's with the same ports, made again), failed (refused by the kernel), dropped (not written: the kernel was too far behind), "+
		"refused_budget (not created: the entries of other directors' connections took their share of nf_conntrack_max).", "result")
	descPeerConntrack = desc("conn_sync_peer_conntrack_entries", "Conntrack entries this director created for other "+
		"directors' FULLNAT connections under ECMP and still counts against conn_sync.peer_conntrack_share.")
	descPeerConntrackLimit = desc("conn_sync_peer_conntrack_limit", "The cap on lvsd_conn_sync_peer_conntrack_entries: "+
		"conn_sync.peer_conntrack_share of nf_conntrack_max (0: nf_conntrack_max unknown, no cap).")
	descConntrackEntries = desc("conntrack_entries", "The kernel's conntrack entries (nf_conntrack_count), read every "+
		"5 s; exported under ECMP with connection sync.")
	descConntrackLimit = desc("conntrack_entries_limit", "The kernel's conntrack table size (nf_conntrack_max), read every "+
		"5 s; exported under ECMP with connection sync.")
	descSyncLag = desc("conn_sync_lag_seconds", "Receive time minus the sender's send time of relay messages "+
		"(includes the directors' clock offset): of the last message, and the largest seen.", "which")
)

// Ownership as one director sees it; across directors, max by (vip) of the
// holders says whether a VIP has no owner or several.
var (
	descClusterInfo = desc("cluster_info", "Always 1; mode is active-standby, active-active or ecmp (where every "+
		"ready director holds every VIP).", "mode")
	descClusterState = desc("cluster_state", "1 for the state this director is in, 0 for the others: starting "+
		"(start-up hold), active (holds VIPs), standby (holds none), no-quorum (too few directors seen), leaving.", "state")
	descVIPHolders = desc("cluster_vip_holders", "Directors that claim the VIP in their heartbeats, as this "+
		"director hears them: 1 is normal (all ready directors under ecmp), 0 no owner, more split ownership.", "vip")
	descConfigDrift = desc("cluster_config_drift", "1 when the service configuration of the live peer director "+
		"differs from this one's, 0 when it is the same; no series for a peer that sends no digest (an earlier release).", "peer")
	descConfigDriftServices = desc("cluster_config_drift_services", "Services defined differently by the live peer "+
		"director and this one, or by one of them only, as far as compared.", "peer")
)

// clusterStates are the values of cluster.View.State.
var clusterStates = []string{"starting", "active", "standby", "no-quorum", "leaving"}

var clusterDescs = []*prometheus.Desc{descClusterLive, descQuorum, descStalls, descRefused, descHeartbeatsRefused, descSyncRefused, descClusterInfo, descClusterState,
	descVIPHolders, descConfigDrift, descConfigDriftServices, descSyncRecords, descSyncDropped, descSyncAntiEntropy, descSyncCache, descSyncPushes, descSyncLag, descPeerFlows,
	descPeerConntrack, descPeerConntrackLimit, descConntrackEntries, descConntrackLimit}

func collectCluster(v *cluster.View, gauge func(*prometheus.Desc, float64, ...string), counter func(*prometheus.Desc, uint64, ...string)) {
	gauge(descClusterLive, float64(v.Live))
	gauge(descQuorum, float64(v.Quorum))
	counter(descStalls, uint64(v.Stalls))
	counter(descRefused, v.RefusedPackets, "packets")
	counter(descRefused, v.RefusedStreams, "streams")
	for reason, n := range v.Refused {
		counter(descHeartbeatsRefused, n, reason)
	}
	gauge(descClusterInfo, 1, string(v.Mode))
	for _, s := range clusterStates {
		gauge(descClusterState, b2f(v.State == s), s)
	}
	for _, vip := range v.VIPs {
		gauge(descVIPHolders, float64(len(vip.Holders)), vip.VIP)
	}
	for _, m := range v.Members {
		if c := m.Config; c != nil && m.Live && c.Match != cluster.ConfigUnknown {
			gauge(descConfigDrift, b2f(c.Match == cluster.ConfigDifferent), m.Name)
			gauge(descConfigDriftServices, float64(c.Differing), m.Name)
		}
	}
}

func collectPeerFlows(s *agent.PeerFlowStats, gauge func(*prometheus.Desc, float64, ...string), counter func(*prometheus.Desc, uint64, ...string)) {
	counter(descPeerFlows, s.Created, "created")
	counter(descPeerFlows, s.Existing, "existing")
	counter(descPeerFlows, s.Refreshed, "refreshed")
	counter(descPeerFlows, s.Replaced, "replaced")
	counter(descPeerFlows, s.Failed, "failed")
	counter(descPeerFlows, s.Dropped, "dropped")
	counter(descPeerFlows, s.RefusedBudget, "refused_budget")
	gauge(descPeerConntrack, float64(s.Live))
	gauge(descPeerConntrackLimit, float64(s.Limit))
	gauge(descConntrackEntries, float64(s.ConntrackEntries))
	gauge(descConntrackLimit, float64(s.ConntrackMax))
}

func collectConnSync(s *connsync.Stats, gauge func(*prometheus.Desc, float64, ...string), counter func(*prometheus.Desc, uint64, ...string)) {
	for stage, n := range map[string]uint64{"read": s.MasterRecords, "sent": s.SentRecords, "replayed": s.ReplayedRecords,
		"resent": s.ResentRecords, "received": s.ReceivedRecords, "applied": s.AppliedRecords,
		"confirmed": s.ConfirmedRecords, "retried": s.RetriedRecords, "unconfirmed": s.UnconfirmedRecords} {
		counter(descSyncRecords, n, stage)
	}
	for event, n := range map[string]uint64{"summary_sent": s.SummariesSent, "summary_received": s.SummariesReceived,
		"message_missing": s.MissingMessages, "request_sent": s.RequestsSent, "request_received": s.RequestsReceived,
		"request_refused": s.RequestsRefused, "fallback_replay": s.FallbackReplays} {
		counter(descSyncAntiEntropy, n, event)
	}
	for reason, n := range map[string]uint64{"invalid": s.DroppedInvalid, "stale": s.DroppedStale,
		"overflow": s.DroppedOverflow, "write": s.DroppedWrite, "backup_down": s.DroppedBackupDown, "evicted": s.Evicted} {
		counter(descSyncDropped, n, reason)
	}
	for reason, n := range map[string]uint64{"replayed": s.DroppedReplayed, "too_old": s.DroppedTooOld,
		"future": s.DroppedFuture, "unproven": s.DroppedUnproven, "unconfigured": s.DroppedUnconfigured,
		"not_holder": s.DroppedNotHolder} {
		counter(descSyncRefused, n, reason)
	}
	gauge(descSyncCache, float64(s.CacheSize))
	counter(descSyncPushes, s.Pushes)
	gauge(descSyncLag, s.LastLag.Seconds(), "last")
	gauge(descSyncLag, s.MaxLag.Seconds(), "max")
}
