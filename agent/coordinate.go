package agent

import (
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/lvsd/lvsd/agent/config"
	"github.com/lvsd/lvsd/agent/planner"
	"github.com/lvsd/lvsd/cluster"
)

// ConfigAgreement tells what the live peers advertise of their service
// configuration, compared with the digest this director advertises
// (cluster.Node). Implementations must be safe for concurrent use.
type ConfigAgreement interface {
	PeerConfigs() cluster.PeerConfigs
	// PeerConfigsChanged delivers a value when PeerConfigs may have changed.
	PeerConfigsChanged() <-chan struct{}
}

// heldChange is a configuration loaded and advertised but not in force
// yet (planner.Coordinate): the services it changes wait until every live
// director advertises them too.
type heldChange struct {
	cfg     *LoadedConfig
	changes Changes  // what it changes of the configuration in force
	sum     [16]byte // its digest, as advertised
	// services are the services whose definition differs from the one in
	// force (added, removed, redefined), by wire name, sorted.
	services []string
	since    time.Time // when its oldest part was loaded
	verdict  planner.CoordinationVerdict
}

// Coordination is what the status and the metrics show of coordinated
// changes.
type Coordination struct {
	// Held is the change waiting for the other directors; nil: none.
	Held *HeldChange
	// Together counts the changes put in force once every live director
	// had them; Alone those put in force after the wait while some lagged.
	Together, Alone uint64
}

// HeldChange is a held change, for the status and the answer to a
// reload.
type HeldChange struct {
	Since time.Time `json:"since"`
	Wait  string    `json:"wait"`
	// Until is when the wait is over: the change goes in force then at the
	// latest, whether or not every live director has it.
	Until time.Time `json:"until"`
	// Lagging names, per service of the change, the live directors that
	// do not advertise its new definition yet (none: not compared yet).
	Lagging map[string][]string `json:"lagging"`
	// Unknown are the live directors whose configuration cannot be
	// compared (an earlier release): not waited for.
	Unknown []string `json:"unknown,omitempty"`
}

// coordinating says whether changes are put in force together with the
// other directors: cluster.coordinated_changes as read at start (the
// cluster keys take effect at a restart), and a cluster to tell.
func (a *Agent) coordinating() bool {
	return a.opts.ConfigAgreement != nil && a.coordinate.Enabled
}

// coordinateFrom is cfg's cluster.coordinated_changes; off without a
// cluster.
func coordinateFrom(cfg *LoadedConfig) config.CoordinatedChanges {
	if c := cfg.Agent.Cluster; c != nil {
		return c.CoordinatedChanges
	}
	return config.CoordinatedChanges{}
}

// latestConfig is the configuration last loaded: the held one, else the
// one in force. A reload reads on from it.
func (a *Agent) latestConfig() *LoadedConfig {
	if a.held != nil {
		return a.held.cfg
	}
	return a.cfg
}

// takeLoaded puts a configuration just loaded (ch: what changed since
// latestConfig) in force, or holds it while coordinating and some service
// changed, advertising it meanwhile. Health is never held: it is not
// configuration.
func (a *Agent) takeLoaded(cfg *LoadedConfig, ch Changes) {
	if a.held != nil {
		ch = mergeChanges(a.held.changes, ch)
	}
	services := changedDigests(a.cfg, cfg)
	if !a.coordinating() || len(services) == 0 {
		if a.held != nil && len(services) == 0 {
			a.log.Info("the held service change was undone before it was put in force", "event", "coordinated_change")
		}
		a.held = nil
		a.setConfig(cfg, ch)
		a.publishCoordination()
		return
	}
	since := a.opts.Now()
	if a.held != nil {
		since = a.held.since
	}
	// Marked as held, the drift check tells a peer that has not loaded the
	// change yet from real drift.
	digest := cfg.ConfigDigest().Holding(a.cfg.ConfigDigest(), since.Add(a.coordinate.Wait))
	a.held = &heldChange{cfg: cfg, changes: ch, sum: digest.Sum, services: services, since: since}
	if a.opts.ConfigDigest != nil {
		a.opts.ConfigDigest.AdvertiseConfig(digest)
	}
	a.log.Info("changed services wait until every live director has them", "event", "coordinated_change",
		"services", cluster.ServiceList(services), "wait", a.coordinate.Wait.String())
	a.decideHeld()
}

// decideHeld puts the held change in force when every live director
// advertises it, or its wait is over.
func (a *Agent) decideHeld() {
	h := a.held
	if h == nil {
		return
	}
	peers := a.opts.ConfigAgreement.PeerConfigs()
	in := planner.CoordinationInput{Services: h.services, Since: h.since, Now: a.opts.Now(),
		Wait: a.coordinate.Wait, Stale: peers.Against != h.sum}
	for name, p := range peers.Peers {
		in.Peers = append(in.Peers, planner.PeerServices{Name: name, Known: p.Known, Same: p.Same, Compared: p.Compared, Differ: p.Differ})
	}
	v := planner.Coordinate(in)
	h.verdict = v
	if !v.Switch {
		a.publishCoordination()
		return
	}
	waited := in.Now.Sub(h.since).Round(time.Millisecond).String()
	if v.TimedOut {
		a.coordination.Alone++
		lagging := planner.LaggingDirectors(v.Lagging)
		if len(lagging) == 0 {
			lagging = []string{"(not compared yet)"}
		}
		a.log.Warn("changed services put in force before every live director had them: flows moving between directors "+
			"may change backend until they do", "event", "coordinated_change", "services", cluster.ServiceList(h.services),
			"lagging", strings.Join(lagging, ","), "waited", waited)
	} else {
		a.coordination.Together++
		args := []any{"event", "coordinated_change", "services", cluster.ServiceList(h.services), "waited", waited}
		if len(v.Unknown) > 0 {
			args = append(args, "not_compared", strings.Join(v.Unknown, ","))
		}
		a.log.Info("changed services put in force: every live director has them", args...)
	}
	a.held = nil
	a.setConfig(h.cfg, h.changes)
	a.publishCoordination()
}

// publishCoordination shows the held change in the snapshot at once:
// holding runs no pass.
func (a *Agent) publishCoordination() {
	c := Coordination{Together: a.coordination.Together, Alone: a.coordination.Alone}
	if h := a.held; h != nil {
		c.Held = &HeldChange{Since: h.since, Wait: a.coordinate.Wait.String(), Until: h.since.Add(a.coordinate.Wait),
			Lagging: map[string][]string{}, Unknown: h.verdict.Unknown}
		for _, s := range h.services {
			c.Held.Lagging[s] = h.verdict.Lagging[s] // none: the directors are not compared yet
		}
	}
	a.coordination = c
	a.republish()
}

// agreementChanged is the channel that tells when the peers'
// configurations may have changed; nil without coordination.
func (a *Agent) agreementChanged() <-chan struct{} {
	if a.opts.ConfigAgreement == nil {
		return nil
	}
	return a.opts.ConfigAgreement.PeerConfigsChanged()
}

// changedDigests are the wire names of the services whose digest differs
// between the configuration in force and next, or that only one of them
// has, sorted.
func changedDigests(inForce, next *LoadedConfig) []string {
	var out []string
	for name, sum := range next.digests {
		if old, ok := inForce.digests[name]; !ok || old != sum {
			out = append(out, cluster.ServiceWireName(name))
		}
	}
	for name := range inForce.digests {
		if _, ok := next.digests[name]; !ok {
			out = append(out, cluster.ServiceWireName(name))
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// mergeChanges is what first and then second changed together.
func mergeChanges(first, second Changes) Changes {
	if first.All || second.All {
		return Changes{All: true}
	}
	out := Changes{Services: maps.Clone(first.Services)}
	if out.Services == nil {
		out.Services = map[string]bool{}
	}
	maps.Copy(out.Services, second.Services)
	return out // Fresh unknown: indexes of two readings do not add up
}
