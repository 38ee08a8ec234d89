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
	out := decideHealth(local, v.node.HealthVotes())
	v.mu.Lock()
	defer v.mu.Unlock()
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
// vote: this director votes its local verdict, each peer in votes votes
// down the targets it lists and up the others. A target is healthy when
// more than half of the voters see it up; a tie is down, so that no
// director sends flows to a backend half of them cannot reach. Without
// peers' votes the local verdicts stand. Pure.
func decideHealth(local map[string]health.State, votes cluster.Votes) map[string]health.State {
	if len(votes) == 0 {
		return local
	}
	voters := 1 + len(votes)
	out := make(map[string]health.State, len(local))
	for key, st := range local {
		id := cluster.HealthID(key)
		down := 0
		if !st.Healthy {
			down++
		}
		for _, seen := range votes {
			if seen[id] {
				down++
			}
		}
		if healthy := 2*(voters-down) > voters; healthy != st.Healthy {
			why := "this director's checks pass"
			if !st.Healthy {
				why = "this director's checks fail"
				if st.LastError != "" {
					why += ": " + st.LastError
				}
			}
			st.Healthy = healthy
			st.LastError = fmt.Sprintf("%s by the directors' vote: %d of %d see it down (%s)", healthWord(healthy), down, voters, why)
		}
		out[key] = st
	}
	return out
}

func healthWord(healthy bool) string {
	if healthy {
		return "healthy"
	}
	return "unhealthy"
}
