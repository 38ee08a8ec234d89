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
	// without any. A peer's set is never changed once returned: a new vote
	// comes as a new set, so the vote tells an unchanged one by identity.
	HealthVotes() cluster.Votes
	// HealthVotesChanged delivers a value when HealthVotes may have changed.
	HealthVotesChanged() <-chan struct{}
}

// votedHealth is the agent's HealthChecker under ECMP: the local checks
// decide this director's vote, and the vote of every live director decides
// the health the agent acts on (decideHealth), so that all of them build
// the same Maglev tables (docs/ecmp.md, "Health agreement"). The decision
// is kept by difference (voteTally): a change costs what changed.
type votedHealth struct {
	local   agent.HealthChecker
	node    HealthVoter
	log     *slog.Logger
	changed chan struct{}

	mu     sync.Mutex
	tally  voteTally
	fresh  map[string]health.State // local states taken in since the agent's last Changes
	dirty  map[string]bool         // targets whose decided state may have changed since
	gone   map[string]bool         // targets removed since
	shared bool                    // this director's vote, as the tally holds it, is shared

	selfOut bool   // this director's vote does not count, as last logged
	peerOut string // the peer whose vote does not count, as last logged; "": none
}

// newVotedHealth returns the vote around local for a director in cluster
// mode ecmp; nil otherwise (the local checks decide).
func newVotedHealth(cfg *agent.LoadedConfig, node HealthVoter, local agent.HealthChecker, log *slog.Logger) *votedHealth {
	c := cfg.Agent.Cluster
	if c == nil || cluster.Mode(c.Mode) != cluster.ECMP {
		return nil
	}
	return newVote(node, local, log)
}

func newVote(node HealthVoter, local agent.HealthChecker, log *slog.Logger) *votedHealth {
	return &votedHealth{local: local, node: node, log: log, changed: make(chan struct{}, 1), tally: newVoteTally(),
		fresh: map[string]health.State{}, dirty: map[string]bool{}, gone: map[string]bool{}}
}

func (v *votedHealth) Set(targets []health.Target) { v.local.Set(targets) }

func (v *votedHealth) Update(groups map[string]bool, targets []health.Target) {
	v.local.Update(groups, targets)
}

func (v *votedHealth) Changed() <-chan struct{} { return v.changed }

// Changes returns the decided state of every target whose local state or
// vote changed since the last call, and those removed. A target changed by
// the vote alone carries the fields of its local state the vote keeps
// (Healthy, Known, Weight, LastError); Snapshot has all of them.
func (v *votedHealth) Changes() (map[string]health.State, []string, bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.absorb()
	states := make(map[string]health.State, len(v.dirty))
	for key := range v.dirty {
		id := healthID(key)
		st, ok := v.fresh[key]
		if !ok {
			tg, _ := v.tally.get(key, id)
			st = tg.state()
		}
		states[key] = v.tally.decide(st, id)
	}
	removed := make([]string, 0, len(v.gone))
	for key := range v.gone {
		removed = append(removed, key)
	}
	v.fresh, v.dirty, v.gone = emptied(v.fresh), emptied(v.dirty), emptied(v.gone)
	return states, removed, false
}

// emptied returns m empty: cleared when small, new when it held many (a
// cleared map keeps its size, and walking it costs that size, so the
// first hand-over of 100,000 targets would tax every later one).
func emptied[V any](m map[string]V) map[string]V {
	if len(m) > 1024 {
		return map[string]V{}
	}
	clear(m)
	return m
}

// Snapshot returns the local states with the vote's verdict.
func (v *votedHealth) Snapshot() map[string]health.State {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.absorb()
	local := v.local.Snapshot()
	if len(v.tally.peers) == 0 {
		return local
	}
	for key, st := range local {
		local[key] = v.tally.decide(st, healthID(key))
	}
	return local
}

// States calls f with the local state of each of keys with the vote's
// verdict, without a copy of every target's (Snapshot).
func (v *votedHealth) States(keys []string, f func(i int, st health.State, ok bool)) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.absorb()
	voted := len(v.tally.peers) > 0
	v.local.States(keys, func(i int, st health.State, ok bool) {
		if ok && voted {
			st = v.tally.decide(st, healthID(keys[i]))
		}
		f(i, st, ok)
	})
}

// takeLocal takes in the local checks' changes and shares this
// director's vote if they changed it: what run does when they change.
func (v *votedHealth) takeLocal() {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.absorb()
}

// absorb takes in what changed of the local states and the peers' votes,
// decides again the targets it touches, logs every target the vote starts
// or stops overruling, and shares this director's vote when it changed;
// v.mu is held.
func (v *votedHealth) absorb() {
	touched := map[uint64]bool{}
	states, removed, all := v.local.Changes()
	if all {
		v.tally.keys(func(key string) {
			if _, ok := states[key]; !ok {
				removed = append(removed, key)
			}
		})
	}
	for _, key := range removed {
		if v.tally.remove(key, touched) {
			v.shared = false
		}
		delete(v.fresh, key)
		delete(v.dirty, key)
		v.gone[key] = true
	}
	for key, st := range states {
		if v.tally.setLocal(key, st, touched) {
			v.shared = false
		}
		v.fresh[key], v.dirty[key] = st, true
		delete(v.gone, key)
	}
	v.tally.setVotes(v.node.HealthVotes(), touched)
	for _, r := range v.tally.settle(touched) {
		v.dirty[r.key] = true
		switch {
		case r.is && !r.was:
			v.log.Warn("the directors' vote overrules this director's health checks", "event", "health", "target", r.key,
				"local", healthWord(!r.decision.Healthy), "voted", healthWord(r.decision.Healthy), "reason", r.decision.LastError)
		case r.was && !r.is:
			v.log.Info("the directors' vote agrees with this director's health checks again", "event", "health", "target", r.key,
				"health", healthWord(r.decision.Healthy))
		}
	}
	v.logNotCounted(v.tally.peers, v.tally.selfOut, v.tally.peerOut)
	if !v.shared {
		v.node.ShareHealth(v.tally.downIDs())
		v.shared = true
	}
}

// overruled reports whether the vote overrules key's local verdict.
func (v *votedHealth) overruled(key string) bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	tg, _ := v.tally.get(key, healthID(key))
	return tg.overruled
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
	v.takeLocal()
	for {
		select {
		case <-ctx.Done():
			return
		case <-v.local.Changed():
			v.takeLocal()
		case <-v.node.HealthVotesChanged():
		}
		select {
		case v.changed <- struct{}{}:
		default:
		}
	}
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
		id := healthID(key)
		down := 0
		if !selfOut && !st.Healthy {
			down++
		}
		for _, seen := range counted {
			if seen[id] {
				down++
			}
		}
		out[key] = overrule(st, down, voters, selfOut)
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
		if !seen[healthID(key)] {
			return false
		}
	}
	return true
}

// overrule returns st, a target's local verdict, decided by the vote:
// down of the voters see it down (this director's vote counts unless
// selfOut); when that overrules the local verdict, LastError says why.
func overrule(st health.State, down, voters int, selfOut bool) health.State {
	healthy := 2*down <= voters
	if healthy == st.Healthy {
		return st
	}
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
	return st
}

func healthWord(healthy bool) string {
	if healthy {
		return "healthy"
	}
	return "unhealthy"
}
