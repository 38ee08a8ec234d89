package views

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
)

// Series of cluster.mode vrrp and cluster.config_sync (docs/operations.md),
// exported only in those.
var (
	descVRRPState = desc("vrrp_state", "1 for the state the virtual router of the address family is in, 0 for "+
		"the others: master (holds the VIPs), backup, initialize (serving no VIP, or stopped).", "family", "vrid", "state")
	descVRRPTransitions = desc("vrrp_master_transitions_total", "Times the virtual router of the address family "+
		"became master on this director.", "family", "vrid")
	descVRRPDropped = desc("vrrp_dropped_packets_total", "VRRP packets the virtual router dropped, by reason "+
		"(another virtual router ID on the link is normal; the others point at a misconfigured peer), and "+
		"advertisements of other addresses than this director's VIPs.", "family", "vrid", "reason")
	descConfigSyncRecords = desc("config_sync_records", "Files kept by the configuration sync, removals "+
		"included: the same on every director once they agree.")
	descConfigSyncRefused = desc("config_sync_refused", "Received files this director refused: they fail the "+
		"check of the services directory (lvsd status names the publisher's file:line:col).")
	descConfigSyncConflicts = desc("config_sync_conflicts", "Files published by two directors, or received and "+
		"overridden by a local file of the same name.")
)

// vrrpStates are the values of VRRPRouterStatus.State.
var vrrpStates = []string{"master", "backup", "initialize"}

var partsDescs = []*prometheus.Desc{descVRRPState, descVRRPTransitions, descVRRPDropped, descConfigSyncRecords,
	descConfigSyncRefused, descConfigSyncConflicts}

func collectVRRP(routers []VRRPRouterStatus, gauge func(*prometheus.Desc, float64, ...string), counter func(*prometheus.Desc, uint64, ...string)) {
	for _, r := range routers {
		vrid := strconv.Itoa(r.VRID)
		for _, s := range vrrpStates {
			gauge(descVRRPState, b2f(r.State == s), r.Family, vrid, s)
		}
		counter(descVRRPTransitions, r.BecameMaster, r.Family, vrid)
		for reason, n := range r.Dropped {
			counter(descVRRPDropped, n, r.Family, vrid, reason)
		}
	}
}

func collectConfigSync(s *ConfigSyncStatus, gauge func(*prometheus.Desc, float64, ...string)) {
	gauge(descConfigSyncRecords, float64(s.Records))
	gauge(descConfigSyncRefused, float64(len(s.Refused)))
	gauge(descConfigSyncConflicts, float64(len(s.Conflicts)))
}
