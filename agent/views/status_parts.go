package views

import (
	"maps"

	"github.com/lvsd/lvsd/agent"
)

// Sources are the director's parts that the agent does not know of, which
// the status and the metrics show; a nil one is not there. Each is called
// at every status query and scrape, from any goroutine.
type Sources struct {
	// VRRP reports the virtual routers of cluster.mode vrrp.
	VRRP func() []VRRPRouterStatus
	// ConfigSync reports cluster.config_sync.
	ConfigSync func() ConfigSyncStatus
}

// NewWith returns the views of a and of the parts in src.
func NewWith(a *agent.Agent, src Sources) *Views { return &Views{a: a, src: src} }

// VRRPRouterStatus is one virtual router of cluster.mode vrrp, one per
// address family of the VIPs.
type VRRPRouterStatus struct {
	Family   string `json:"family"` // ipv4 or ipv6
	VRID     int    `json:"vrid"`
	State    string `json:"state"` // master, backup or initialize (serving no VIP, or stopped)
	Priority int    `json:"priority"`
	// Master is the master this backup last heard an advertisement from;
	// empty while this director is master or has heard none.
	Master         string  `json:"master,omitempty"`
	AdvertInterval float64 `json:"advert_interval_seconds"`
	// BecameMaster counts the times this director became master.
	BecameMaster uint64 `json:"master_transitions"`
	// Dropped counts the packets dropped, by reason (none: omitted).
	Dropped map[string]uint64 `json:"dropped,omitempty"`
}

// ConfigSyncStatus is cluster.config_sync on this director.
type ConfigSyncStatus struct {
	// Records are the files kept, tombstones included: Published by this
	// director, the others received.
	Records   int    `json:"records"`
	Published int    `json:"published"`
	Digest    string `json:"digest"`
	// Refused are the received files that failed the check, by name, with
	// the problems found (the publisher's file:line:col).
	Refused map[string]string `json:"refused,omitempty"`
	// Conflicts are the files two publishers published, or a received one
	// that a local file of the same name overrides here, by name.
	Conflicts map[string]string `json:"conflicts,omitempty"`
}

// addParts adds what the director's parts in v.src say.
func (v *Views) addParts(st *Status) {
	if v.src.VRRP != nil {
		st.VRRP = v.src.VRRP()
	}
	if v.src.ConfigSync != nil {
		cs := v.src.ConfigSync()
		cs.Refused, cs.Conflicts = maps.Clone(cs.Refused), maps.Clone(cs.Conflicts)
		st.ConfigSync = &cs
	}
}
