package cluster

import (
	"hash/fnv"
	"maps"
	"slices"
)

// The health vote: under ECMP every director schedules new connections
// for the same VIP, and the routers move flows between them; directors
// whose checks disagree about a backend build different Maglev tables, and
// a flow moved between them changes backend. So in cluster mode ecmp each
// director's heartbeats carry the health targets it sees down (by
// HealthID: a hash of the target's key, the same on every director with
// the same configuration), and each director decides health from the
// votes (agent/director). The vote rides the heartbeat: it is sealed like
// it, replay-proof like it, and a director that fails stops voting when it
// stops counting as live.

// MaxDown bounds the targets a director votes down (at most 8 bytes each
// in every heartbeat). A director that sees more down abstains (ShareHealth
// with nil): its peers decide without it.
const MaxDown = 2048

// HealthID names a health target in the vote: FNV-1a of its key.
func HealthID(key string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(key))
	return h.Sum64()
}

// Votes are the peers' health votes: for every live, ready director that
// votes, the targets it sees down (by HealthID). A peer's set is replaced,
// never changed, when its vote changes: a reader may keep it and tell an
// unchanged vote by identity.
type Votes map[string]map[uint64]bool

// ShareHealth makes this director vote: down are the targets it sees down
// (HealthIDs, at most MaxDown); nil: it abstains. Heartbeats carry it from
// the next one, sent at once.
func (n *Node) ShareHealth(down []uint64) {
	share := &healthShare{}
	if down != nil {
		share.votes = true
		share.down = slices.Compact(slices.Sorted(slices.Values(down)))
		if len(share.down) > MaxDown {
			n.log.Warn("too many backends down to vote on their health; the other directors decide without this one",
				"down", len(share.down), "max", MaxDown)
			share = &healthShare{}
		}
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	n.share = share
	n.signal()
}

// HealthVotes returns the peers' votes as last heard.
func (n *Node) HealthVotes() Votes {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.votes
}

// HealthVotesChanged delivers a value when HealthVotes may have changed.
func (n *Node) HealthVotesChanged() <-chan struct{} { return n.votesChanged }

// healthShare is a ShareHealth not yet taken in by the loop.
type healthShare struct {
	votes bool
	down  []uint64
}

// publishVotes runs on the loop after a change: the votes of the live,
// ready peers that vote, published when they differ from the last ones.
func (s *loopState) publishVotes() {
	votes := Votes{}
	for _, p := range s.peers {
		if p.state.live() && p.ready && p.health != nil {
			votes[p.name] = p.health
		}
	}
	s.healthDirty = false
	n := s.n
	n.mu.Lock()
	same := maps.EqualFunc(votes, n.votes, func(a, b map[uint64]bool) bool { return maps.Equal(a, b) })
	if !same {
		n.votes = votes
	}
	n.mu.Unlock()
	if !same {
		select {
		case n.votesChanged <- struct{}{}:
		default:
		}
	}
}
