package director

import (
	"maps"
	"reflect"

	"github.com/lvsd/lvsd/agent/health"
	"github.com/lvsd/lvsd/cluster"
)

// healthID names a target in the vote (cluster.HealthID); a variable so
// that a test can make targets collide.
var healthID = cluster.HealthID

// voteTally is the health vote kept up to date by difference. What it
// holds of the local verdicts and of the peers' votes is changed by what
// changed, and only the targets whose inputs changed are decided again:
// one flap or one peer's vote costs in proportion to the change (and to
// the size of the votes when who counts changes), not to the number of
// targets, which is 100,000 at 10,000 services. tallyVotes is the same
// decision from scratch; a model test holds them equal.
type voteTally struct {
	targets   map[uint64]voteTarget // by HealthID
	collided  map[string]voteTarget // by key: those whose HealthID another target's already names
	localUp   int                   // targets the local checks see up
	localDown map[uint64]int        // by HealthID: targets the local checks see down
	peers     cluster.Votes         // the peers' votes taken in; their sets are never changed in place
	peerDown  map[uint64]int        // by HealthID: peers that vote it down
	covers    map[string]int        // by peer: targets its vote lists down
	selfOut   bool                  // this director's vote does not count (notCounted)
	peerOut   string                // the peer whose vote does not count; "": none
	counted   int                   // voters() as last settled
	voting    bool                  // some peer voted, as last settled
}

// voteTarget is what the tally keeps of one target: the local verdict's
// fields that the decision and the agent use, not the whole health.State
// (a quarter of a KiB each).
type voteTarget struct {
	key       string
	lastError string
	weight    int
	known     bool
	down      bool // the local checks see it down
	overruled bool // the vote decides against the local checks
}

// state is the local verdict as the tally keeps it.
func (t voteTarget) state() health.State {
	return health.State{Healthy: !t.down, Known: t.known, Weight: t.weight, LastError: t.lastError}
}

func newVoteTally() voteTally {
	return voteTally{
		targets: map[uint64]voteTarget{}, collided: map[string]voteTarget{}, localDown: map[uint64]int{},
		peers: cluster.Votes{}, peerDown: map[uint64]int{}, covers: map[string]int{}, counted: 1,
	}
}

// redecided is a target decided again: whether the vote overruled its
// local verdict before and does now.
type redecided struct {
	key      string
	was, is  bool
	decision health.State
}

func (t *voteTally) size() int { return len(t.targets) + len(t.collided) }

func (t *voteTally) get(key string, id uint64) (voteTarget, bool) {
	if tg, ok := t.targets[id]; ok && tg.key == key {
		return tg, true
	}
	tg, ok := t.collided[key]
	return tg, ok
}

func (t *voteTally) put(id uint64, tg voteTarget) {
	if cur, ok := t.targets[id]; !ok || cur.key == tg.key {
		t.targets[id] = tg
		delete(t.collided, tg.key) // it was there while another held id
		return
	}
	t.collided[tg.key] = tg
}

// forKeys calls f with every target named id (one but for a collision).
func (t *voteTally) forKeys(id uint64, f func(voteTarget)) {
	if tg, ok := t.targets[id]; ok {
		f(tg)
	}
	for _, tg := range t.collided {
		if healthID(tg.key) == id {
			f(tg)
		}
	}
}

func (t *voteTally) keysNamed(id uint64) int {
	n := 0
	t.forKeys(id, func(voteTarget) { n++ })
	return n
}

// setLocal takes in a target's local verdict (a new one is added), notes
// in touched the HealthIDs to decide again, and reports whether this
// director's vote changed.
func (t *voteTally) setLocal(key string, st health.State, touched map[uint64]bool) (voteChanged bool) {
	id := healthID(key)
	old, ok := t.get(key, id)
	tg := voteTarget{key: key, lastError: st.LastError, weight: st.Weight, known: st.Known, down: !st.Healthy, overruled: old.overruled}
	t.put(id, tg)
	if ok && old.down == tg.down {
		return false
	}
	if ok {
		t.countLocal(id, old.down, -1)
	} else {
		for name, seen := range t.peers {
			if seen[id] {
				t.covers[name]++
			}
		}
	}
	t.countLocal(id, tg.down, +1)
	touched[id] = true
	return ok || tg.down // a new target changes the vote only when down
}

// remove forgets a target, notes its HealthID in touched, and reports
// whether this director's vote changed.
func (t *voteTally) remove(key string, touched map[uint64]bool) (voteChanged bool) {
	id := healthID(key)
	tg, ok := t.get(key, id)
	if !ok {
		return false
	}
	if cur, primary := t.targets[id]; primary && cur.key == key {
		delete(t.targets, id)
	} else {
		delete(t.collided, key)
	}
	t.countLocal(id, tg.down, -1)
	for name, seen := range t.peers {
		if seen[id] {
			t.covers[name]--
		}
	}
	touched[id] = true
	return tg.down
}

func (t *voteTally) countLocal(id uint64, down bool, by int) {
	if !down {
		t.localUp += by
		return
	}
	if t.localDown[id] += by; t.localDown[id] == 0 {
		delete(t.localDown, id)
	}
}

// setVotes takes in the peers' votes, noting in touched the HealthIDs
// whose count changed. A peer's set that is the one taken in before is
// skipped: cluster.Node keeps a peer's set until its vote changes.
func (t *voteTally) setVotes(votes cluster.Votes, touched map[uint64]bool) {
	for name, old := range t.peers {
		if _, ok := votes[name]; !ok {
			t.diffPeer(name, old, nil, touched)
			delete(t.covers, name)
		}
	}
	for name, seen := range votes {
		old, ok := t.peers[name]
		if ok && sameSet(old, seen) {
			continue
		}
		if !ok {
			t.covers[name] = 0
		}
		t.diffPeer(name, old, seen, touched)
	}
	t.peers = maps.Clone(votes)
}

// diffPeer counts the difference between a peer's old and new set.
func (t *voteTally) diffPeer(name string, old, seen map[uint64]bool, touched map[uint64]bool) {
	for id := range old {
		if !seen[id] {
			if t.peerDown[id]--; t.peerDown[id] == 0 {
				delete(t.peerDown, id)
			}
			t.covers[name] -= t.keysNamed(id)
			touched[id] = true
		}
	}
	for id := range seen {
		if !old[id] {
			t.peerDown[id]++
			t.covers[name] += t.keysNamed(id)
			touched[id] = true
		}
	}
}

// sameSet reports whether a and b are the same map (not merely equal).
func sameSet(a, b map[uint64]bool) bool {
	return reflect.ValueOf(a).UnsafePointer() == reflect.ValueOf(b).UnsafePointer()
}

// voters is how many votes count.
func (t *voteTally) voters() int {
	n := len(t.peers)
	if t.peerOut != "" {
		n--
	}
	if !t.selfOut {
		n++
	}
	return n
}

// settle decides again the targets named in touched, and every one the
// vote may overrule (seen down by this director or a peer) when who
// counts changed, and returns them.
func (t *voteTally) settle(touched map[uint64]bool) []redecided {
	selfOut, peerOut := t.selfOut, t.peerOut
	t.selfOut, t.peerOut = t.notCounted()
	voters, voting := t.voters(), len(t.peers) > 0
	if selfOut != t.selfOut || peerOut != t.peerOut || voters != t.counted || voting != t.voting {
		// Who counts changed: every target some voter sees down.
		for id := range t.localDown {
			touched[id] = true
		}
		for id := range t.peerDown {
			touched[id] = true
		}
	}
	t.counted, t.voting = voters, voting
	var out []redecided
	for id := range touched {
		t.forKeys(id, func(tg voteTarget) {
			d := t.decide(tg.state(), id)
			r := redecided{key: tg.key, was: tg.overruled, is: d.Healthy == tg.down, decision: d}
			if r.was != r.is {
				tg.overruled = r.is
				t.put(id, tg)
			}
			if r.was || r.is {
				out = append(out, r)
			}
		})
	}
	return out
}

// decide returns st, a target's local verdict, with the vote's decision
// (tallyVotes, from the counts kept).
func (t *voteTally) decide(st health.State, id uint64) health.State {
	if len(t.peers) == 0 {
		return st
	}
	down := t.peerDown[id]
	if t.peerOut != "" && t.peers[t.peerOut][id] {
		down--
	}
	if !t.selfOut && !st.Healthy {
		down++
	}
	return overrule(st, down, t.voters(), t.selfOut)
}

// notCounted is notCounted from the counts kept.
func (t *voteTally) notCounted() (selfOut bool, peerOut string) {
	n := t.size()
	if n == 0 || len(t.peers) == 0 {
		return false, ""
	}
	var allDown []string
	for name := range t.peers {
		if t.covers[name] == n {
			allDown = append(allDown, name)
		}
	}
	selfAllDown := t.localUp == 0
	switch {
	case selfAllDown && len(allDown) == 0:
		return true, ""
	case !selfAllDown && len(allDown) == 1:
		return false, allDown[0]
	}
	return false, ""
}

// downIDs is this director's vote: the HealthIDs its checks see down.
func (t *voteTally) downIDs() []uint64 {
	down := make([]uint64, 0, len(t.localDown))
	for id := range t.localDown {
		down = append(down, id)
	}
	return down
}

// keys calls f with every target's key.
func (t *voteTally) keys(f func(string)) {
	for _, tg := range t.targets {
		f(tg.key)
	}
	for key := range t.collided {
		f(key)
	}
}
