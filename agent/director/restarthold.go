package director

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/netip"
	"slices"
	"time"

	"github.com/lvsd/lvsd/agent"
	"github.com/lvsd/lvsd/agent/api"
	"github.com/lvsd/lvsd/agent/statefile"
	"github.com/lvsd/lvsd/arp"
	"github.com/lvsd/lvsd/cluster"
)

// A restart hold (`lvsd restart-hold`, cluster/restarthold.go) keeps a
// restarting director's VIPs where they are. Here the director's side of
// it: the local API call that asks for it, the VIP addresses' lifetime
// stretched over it, the record in state_dir the next process reads, and
// the adoption of the addresses at start.

// RouteRestartHold is the local API call of `lvsd restart-hold`:
// POST ?for=DURATION (0 ends a hold). It answers a RestartHoldStatus.
const RouteRestartHold = "/v1/restart-hold"

// RestartHoldStatus is the answer of RouteRestartHold.
type RestartHoldStatus struct {
	Schema int    `json:"schema"`
	Node   string `json:"node"`
	// HoldSeconds is the hold asked for, 0 when it was ended.
	HoldSeconds float64   `json:"hold_seconds"`
	Until       time.Time `json:"until,omitzero"`
	// VIPs are the VIPs this director holds and keeps over the restart.
	VIPs []string `json:"vips"`
}

// restartHoldFile is the record of a hold in state_dir, read (and
// cleared) by the next start.
const restartHoldFile = "restart-hold.json"

type restartHoldRecord struct {
	Until time.Time    `json:"until,omitzero"`
	VIPs  []netip.Addr `json:"vips,omitempty"`
}

// holdForRestart asks the cluster for a restart hold of d, stretches the
// VIP addresses' lifetime over it and records it for the next process.
func (m member) holdForRestart(ctx context.Context, stateDir string, d time.Duration) (cluster.RestartHold, error) {
	if m.vrrp != nil {
		return cluster.RestartHold{}, errors.New("a restart hold is for lvsd's own cluster modes: in mode vrrp a stop hands the VIPs to the backup at once")
	}
	if m.node == nil {
		return cluster.RestartHold{}, errors.New("a restart hold is for a director in a cluster: this one has no cluster block and keeps its VIPs over a restart anyway")
	}
	h, err := m.node.HoldForRestart(ctx, d)
	if err != nil {
		return h, err
	}
	// Recorded before the lifetimes: an address that outlives the process
	// is adopted by the next one only with the record.
	if err := statefile.Save(stateDir, restartHoldFile, restartHoldRecord(h)); err != nil {
		_, _ = m.node.HoldForRestart(ctx, 0)
		return cluster.RestartHold{}, err
	}
	if err := m.leases.HoldUntil(ctx, h.Until); err != nil {
		return h, err
	}
	return h, nil
}

// takeRestartHold reads the record a previous process left under a
// restart hold, and clears it: a process that dies at start must not
// adopt again at the next. It returns the zero record when there is none,
// or when its hold is over.
func takeRestartHold(stateDir string, now time.Time, log *slog.Logger) restartHoldRecord {
	var rec restartHoldRecord
	if err := statefile.Load(stateDir, restartHoldFile, &rec); err != nil {
		log.Error("reading the restart hold record; the VIPs move as after any stop", "err", err)
		return restartHoldRecord{}
	}
	if rec.Until.IsZero() {
		return rec
	}
	if err := statefile.Save(stateDir, restartHoldFile, restartHoldRecord{}); err != nil {
		log.Error("clearing the restart hold record; not adopting", "err", err)
		return restartHoldRecord{}
	}
	if !now.Before(rec.Until) {
		log.Warn("the restart hold ended before this start: the VIPs moved as after any stop",
			"late", now.Sub(rec.Until).Round(time.Millisecond).String())
		return restartHoldRecord{}
	}
	return rec
}

// restartHoldInForce reports whether a restart hold recorded for the next
// process is running: the stop is a planned restart.
func restartHoldInForce(stateDir string, now time.Time) bool {
	var rec restartHoldRecord
	if err := statefile.Load(stateDir, restartHoldFile, &rec); err != nil {
		return false
	}
	return now.Before(rec.Until)
}

// adoptAddresses leases the addresses the previous process owned and left
// on the interfaces with a lifetime, so they are renewed from now on; the
// holder then keeps or removes them as the cluster decides. It returns the
// VIPs of rec whose address it adopted: a VIP handed over during the hold
// has none here, and must not be claimed again.
func adoptAddresses(ctx context.Context, leases *arp.Leased, stateDir string, rec restartHoldRecord) ([]netip.Addr, int, error) {
	owned, err := agent.LoadOwnedAddresses(stateDir)
	if err != nil {
		return nil, 0, err
	}
	present := map[string][]netip.Prefix{}
	found := map[netip.Addr]bool{}
	k := 0
	for _, a := range owned.Addresses {
		ps, ok := present[a.Interface]
		if !ok {
			// An interface gone since (a VLAN removed) has nothing to adopt.
			if ps, err = leases.Addrs.ListExpiring(ctx, a.Interface); err != nil && !errors.Is(err, arp.ErrNotFound) {
				return nil, k, err
			}
			present[a.Interface] = ps
		}
		if slices.Contains(ps, a.Prefix) {
			leases.Adopt(a.Interface, a.Prefix)
			found[a.Prefix.Addr()] = true
			k++
		}
	}
	var vips []netip.Addr
	for _, v := range rec.VIPs {
		if found[v] {
			vips = append(vips, v)
		}
	}
	return vips, k, nil
}

// serveRestartHold adds RouteRestartHold to the local API.
func serveRestartHold(h http.Handler, m member, node, stateDir string) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/", h)
	mux.HandleFunc("POST "+RouteRestartHold, func(w http.ResponseWriter, r *http.Request) {
		d, err := time.ParseDuration(r.URL.Query().Get("for"))
		if err != nil || d < 0 || d > cluster.MaxRestartHold {
			http.Error(w, "for: a duration of 0 (end the hold) to "+cluster.MaxRestartHold.String(), http.StatusBadRequest)
			return
		}
		hold, err := m.holdForRestart(r.Context(), stateDir, d)
		if err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		st := RestartHoldStatus{Schema: api.SchemaVersion, Node: node, HoldSeconds: d.Seconds(), Until: hold.Until, VIPs: []string{}}
		for _, v := range hold.VIPs {
			st.VIPs = append(st.VIPs, v.String())
		}
		api.WriteJSON(w, st)
	})
	return mux
}
