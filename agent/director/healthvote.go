package director

import (
	"context"
	"fmt"
	"log/slog"
	"sync"

	"github.com/lvsd/lvsd/agent"
	"github.com/lvsd/lvsd/agent/health"
	"github.com/lvsd/lvsd/cluster"
)

// HealthVoter is what the health vote uses of the cluster node
// (cluster.Node): it carries this director's vote and hears the peers'.
// Only mode ecmp votes (newVotedHealth); in the other modes nobody calls
// ShareHealth, so HealthVotes stays empty and the local checks decide.
type HealthVoter interface {
	// ShareHealth makes this director vote the targets it sees down
	// (cluster.HealthID); nil: it abstains.
	ShareHealth(down []uint64)
	// HealthVotes returns the votes of the live peers that vote; empty
	// without any.
	HealthVotes() cluster.Votes
	// HealthVotesChanged delivers a value when HealthVotes may have changed.
	HealthVotesChanged() <-chan struct{}
}

// votedHealth is the agent's HealthChecker under ECMP: the local checks
// decide this director's vote, and the vote of every live director decides
// the health the agent acts on (decideHealth), so that all of them build
// the same Maglev tables (docs/ecmp.md, "Health agreement").
type votedHealth struct {
	local   agent.HealthChecker
	node    HealthVoter
	log     *slog.Logger
	changed chan struct{}

	mu        sync.Mutex
	overruled map[string]bool // targets whose local verdict the vote overrules, as last logged
	selfOut   bool            // this director's vote does not count, as last logged
	peerOut   string          // the peer whose vote does not count, as last logged; "": none
}

// newVotedHealth returns the vote around local for a director in cluster
// mode ecmp; nil otherwise (the local checks decide).
func newVotedHealth(cfg *agent.LoadedConfig, node HealthVoter, local agent.HealthChecker, log *slog.Logger) *votedHealth {
	c := cfg.Agent.Cluster
	if c == nil || cluster.Mode(c.Mode) != cluster.ECMP {
		return nil
	}
	return &votedHealth{local: local, node: node, log: log, changed: make(chan struct{}, 1), overruled: map[string]bool{}}
}

func (v *votedHealth) Set(targets []health.Target) { v.local.Set(targets) }

func (v *votedHealth) Update(groups map[string]bool, targets []health.Target) {
	v.local.Update(groups, targets)
}

func (v *votedHealth) Changed() <-chan struct{} { return v.changed }

// Changes is every target's state: a peer's vote can change any verdict,
// so the vote cannot tell what changed. The local checker's record of its
// changes is taken (and dropped) so that it does not grow.
func (v *votedHealth) Changes() (map[string]health.State, []string, bool) {
	v.local.Changes()
	return v.Snapshot(), nil, true
}

// Snapshot returns the local states with the vote's verdict, and logs
// every target the vote starts or stops overruling.
func (v *votedHealth) Snapshot() map[string]health.State {
	local := v.local.Snapshot()
	votes := v.node.HealthVotes()
	out, selfOut, peerOut := tallyVotes(local, votes)
	v.mu.Lock()
	defer v.mu.Unlock()
	v.logNotCounted(votes, selfOut, peerOut)
	for key, st := range out {
		over := st.Healthy != local[key].Healthy
		if over == v.overruled[key] {
			continue
		}
		if over {
			v.overruled[key] = true
			v.log.Warn("the directors' vote overrules this director's health checks", "event", "health", "target", key,
				"local", healthWord(local[key].Healthy), "voted", healthWord(st.Healthy), "reason", st.LastError)
		} else {
			delete(v.overruled, key)
			v.log.Info("the directors' vote agrees with this director's health checks again", "event", "health", "target", key,
				"health", healthWord(st.Healthy))
		}
	}
	for key := range v.overruled {
		if _, ok := out[key]; !ok {
			delete(v.overruled, key)
		}
	}
	return out
}

// logNotCounted logs every director whose vote starts or stops not
// counting (notCounted); v.mu is held.
func (v *votedHealth) logNotCounted(votes cluster.Votes, selfOut bool, peerOut string) {
	if selfOut != v.selfOut {
		v.selfOut = selfOut
		if selfOut {
			v.log.Warn("this director's checks alone see every backend down while the other directors see some up; "+
				"its health vote does not count until they agree (check its path to the backends)", "event", "health")
		} else {
			v.log.Info("this director's health vote counts again", "event", "health")
		}
	}
	if peerOut == v.peerOut {
		return
	}
	if _, votes := votes[v.peerOut]; votes && v.peerOut != "" {
		v.log.Info("a director's health vote counts again", "event", "health", "peer", v.peerOut)
	}
	v.peerOut = peerOut
	if peerOut != "" {
		v.log.Warn("a director's checks alone see every backend down while the others see some up; "+
			"its health vote does not count until they agree", "event", "health", "peer", peerOut)
	}
}

// run shares the local verdicts as this director's vote, and tells the
// agent when the local checks or the peers' votes changed, until ctx ends.
func (v *votedHealth) run(ctx context.Context) {
	v.share()
	for {
		select {
		case <-ctx.Done():
			return
		case <-v.local.Changed():
			v.share()
		case <-v.node.HealthVotesChanged():
		}
		select {
		case v.changed <- struct{}{}:
		default:
		}
	}
}

// share votes the targets the local checks see down.
func (v *votedHealth) share() {
	down := []uint64{}
	for key, st := range v.local.Snapshot() {
		if !st.Healthy {
			down = append(down, cluster.HealthID(key))
		}
	}
	v.node.ShareHealth(down)
}

// decideHealth returns local with every target's health decided by the
// vote (tallyVotes).
func decideHealth(local map[string]health.State, votes cluster.Votes) map[string]health.State {
	out, _, _ := tallyVotes(local, votes)
	return out
}

// tallyVotes returns local with every target's health decided by the
// vote: this director votes its local verdict, each peer in votes votes
// down the targets it lists and up the others, and a voter that alone sees
// every target down does not count (notCounted). A target is out only
// when more than half of the counted voters see it down: a tie keeps it
// in, so that one director in two, cut off from the backends or lying,
// cannot take them out of the other's tables and withdraw its VIPs; the
// cost is that the one that sees a backend down may send flows to it.
// Without peers' votes the local verdicts stand. It also returns whether
// this director's vote does not count, and the peer whose vote does not
// ("": none). Pure.
func tallyVotes(local map[string]health.State, votes cluster.Votes) (out map[string]health.State, selfOut bool, peerOut string) {
	if len(votes) == 0 {
		return local, false, ""
	}
	selfOut, peerOut = notCounted(local, votes)
	counted := make([]map[uint64]bool, 0, len(votes))
	for name, seen := range votes {
		if name != peerOut {
			counted = append(counted, seen)
		}
	}
	voters := len(counted)
	if !selfOut {
		voters++
	}
	out = make(map[string]health.State, len(local))
	for key, st := range local {
		id := cluster.HealthID(key)
		down := 0
		if !selfOut && !st.Healthy {
			down++
		}
		for _, seen := range counted {
			if seen[id] {
				down++
			}
		}
		if healthy := 2*down <= voters; healthy != st.Healthy {
			why := "this director's checks pass"
			if !st.Healthy {
				why = "this director's checks fail"
				if st.LastError != "" {
					why += ": " + st.LastError
				}
				if selfOut {
					why += "; it alone sees every backend down, so its vote does not count"
				}
			}
			st.Healthy = healthy
			st.LastError = fmt.Sprintf("%s by the directors' vote: %d of %d see it down (%s)", healthWord(healthy), down, voters, why)
		}
		out[key] = st
	}
	return out, selfOut, peerOut
}

// notCounted returns whether this director's vote does not count, and
// the peer whose vote does not ("": none): the one voter, if only one,
// whose checks see every target of every service down while the others
// see some up. Such a director is more likely cut off from the backends
// (or faulty) than every backend failed at once, and the one that is
// right about them should not be outvoted by it; when the backends do all
// fail, every director sees it and none is left out. Pure.
func notCounted(local map[string]health.State, votes cluster.Votes) (selfOut bool, peerOut string) {
	if len(local) == 0 || len(votes) == 0 {
		return false, ""
	}
	selfAllDown := true
	for _, st := range local {
		if st.Healthy {
			selfAllDown = false
			break
		}
	}
	var allDown []string
	for name, seen := range votes {
		if seesAllDown(local, seen) {
			allDown = append(allDown, name)
		}
	}
	switch {
	case selfAllDown && len(allDown) == 0:
		return true, ""
	case !selfAllDown && len(allDown) == 1:
		return false, allDown[0]
	}
	return false, ""
}

// seesAllDown reports whether a peer's vote lists every target of local down.
func seesAllDown(local map[string]health.State, seen map[uint64]bool) bool {
	for key := range local {
		if !seen[cluster.HealthID(key)] {
			return false
		}
	}
	return true
}

func healthWord(healthy bool) string {
	if healthy {
		return "healthy"
	}
	return "unhealthy"
}

// takeLocal is what run does on a change of the local checks.
func (v *votedHealth) takeLocal() { v.share() }
