package director

import (
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/lvsd/lvsd/agent/health"
	"github.com/lvsd/lvsd/cluster"
)

// After every step of a random run (local verdicts flapping, targets
// added and removed, peers voting, abstaining and seeing everything down,
// the local checker telling what changed or everything), the vote kept by
// difference decides what tallyVotes decides from scratch: in what the
// agent holds from Changes, in Snapshot, in the targets it logs as
// overruled, and in the vote it shares.
func TestVoteTallyMatchesFromScratch(t *testing.T) {
	for _, tc := range []struct {
		name string
		id   func(string) uint64
	}{
		{"by HealthID", cluster.HealthID},
		{"targets sharing HealthIDs", func(key string) uint64 { return cluster.HealthID(key) % 4 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			healthID = tc.id
			defer func() { healthID = cluster.HealthID }()
			seed := uint64(time.Now().UnixNano())
			t.Logf("seed %d", seed)
			runVoteModel(t, rand.New(rand.NewPCG(seed, 32)), 3000)
		})
	}
}

func runVoteModel(t *testing.T, rng *rand.Rand, steps int) {
	t.Helper()
	var universe []string
	for i := range 12 {
		universe = append(universe, fmt.Sprintf("web/10.0.0.%d:80", i+1))
	}
	var ids []uint64
	for _, key := range universe {
		ids = append(ids, healthID(key))
	}
	ids = append(ids, 99) // a target this director does not check
	peers := []string{"b", "c", "d"}

	randomState := func() health.State {
		return health.State{
			Healthy:   rng.IntN(5) < 3,
			Known:     rng.IntN(4) > 0,
			Weight:    []int{health.NoWeight, 0, 5}[rng.IntN(3)],
			LastError: []string{"", "connection refused", "timeout"}[rng.IntN(3)],
		}
	}
	local := newIncrementalChecks(map[string]health.State{})
	for _, key := range universe[:8] {
		local.set(key, randomState())
	}
	node := &fakeVoter{votes: cluster.Votes{}, changed: make(chan struct{}, 1)}
	v := newVote(node, local, slog.New(slog.DiscardHandler))
	agentView := map[string]health.State{}

	for step := range steps {
		votes := maps.Clone(node.votes) // the sets a step does not change stay the same maps
		switch op := rng.IntN(10); {
		case op < 3:
			local.set(universe[rng.IntN(len(universe))], randomState())
		case op == 3:
			local.remove(universe[rng.IntN(len(universe))])
		case op == 4:
			for _, key := range universe { // every backend down here
				local.set(key, health.State{Known: true, LastError: "no route to host"})
			}
		case op < 8:
			seen := map[uint64]bool{}
			for _, id := range ids {
				if rng.IntN(3) == 0 {
					seen[id] = true
				}
			}
			votes[peers[rng.IntN(len(peers))]] = seen
		case op == 8:
			delete(votes, peers[rng.IntN(len(peers))]) // abstains, or is gone
		default:
			votes[peers[rng.IntN(len(peers))]] = maps.Collect(func(yield func(uint64, bool) bool) {
				for _, id := range ids {
					yield(id, true) // sees every backend down
				}
			})
		}
		node.votes = votes
		local.all = rng.IntN(10) == 0
		if rng.IntN(2) == 0 {
			v.takeLocal()
		}
		states, removed, all := v.Changes()
		if all {
			t.Fatal("Changes hands over every state")
		}
		maps.Copy(agentView, states)
		for _, key := range removed {
			delete(agentView, key)
		}

		localNow := local.Snapshot()
		want := decideHealth(localNow, node.votes)
		if len(agentView) != len(want) {
			t.Fatalf("step %d: the agent holds %d targets, want %d", step, len(agentView), len(want))
		}
		for key, w := range want {
			got := agentView[key]
			overruled := w.Healthy != localNow[key].Healthy
			if got.Healthy != w.Healthy || got.Weight != w.Weight || got.Known != w.Known || overruled && got.LastError != w.LastError {
				t.Fatalf("step %d: %s decided %+v, want %+v", step, key, got, w)
			}
			if v.overruled(key) != overruled {
				t.Fatalf("step %d: %s overruled %v, want %v", step, key, v.overruled(key), overruled)
			}
		}
		if step%10 == 0 {
			if got := v.Snapshot(); !maps.Equal(got, want) {
				t.Fatalf("step %d: snapshot %v, want %v", step, got, want)
			}
		}
		var down []uint64
		for key, st := range localNow {
			if !st.Healthy {
				down = append(down, healthID(key))
			}
		}
		if got, want := node.lastShared(), slices.Compact(slices.Sorted(slices.Values(down))); !slices.Equal(got, want) {
			t.Fatalf("step %d: shared %v, want %v", step, got, want)
		}
	}
}

// The agent hears of what changed only: a local flap is that target, a
// peer's vote the targets whose decision it can change, and nothing when
// nothing changed.
func TestVotedHealthChangesOnlyWhatChanged(t *testing.T) {
	keys := scaleKeys(10, 10)
	states := map[string]health.State{}
	for _, key := range keys {
		states[key] = health.State{Healthy: true, Known: true}
	}
	local := newIncrementalChecks(states)
	b := map[uint64]bool{}
	node := &fakeVoter{votes: cluster.Votes{"b": b, "c": {}}, changed: make(chan struct{}, 1)}
	v := newVote(node, local, slog.New(slog.DiscardHandler))
	changed := func() []string {
		t.Helper()
		states, removed, all := v.Changes()
		if all || len(removed) > 0 {
			t.Fatalf("Changes: all %v, removed %v", all, removed)
		}
		return slices.Sorted(maps.Keys(states))
	}
	if got := changed(); len(got) != len(keys) {
		t.Fatalf("first Changes: %d targets, want every one (%d)", len(got), len(keys))
	}
	if got := changed(); len(got) != 0 {
		t.Errorf("nothing changed, Changes: %v", got)
	}
	local.set(keys[3], health.State{Known: true, LastError: "connection refused"})
	if got := changed(); !slices.Equal(got, []string{keys[3]}) {
		t.Errorf("one flap, Changes: %v, want %v", got, keys[3:4])
	}
	if got := node.lastShared(); !slices.Equal(got, []uint64{cluster.HealthID(keys[3])}) {
		t.Errorf("shared %v, want %s", got, keys[3])
	}
	// b sees keys[3] and keys[5] down: keys[3] goes out (2 of 3; it was
	// kept in at 1 of 3), keys[5] stays in (1 of 3).
	b = map[uint64]bool{cluster.HealthID(keys[3]): true, cluster.HealthID(keys[5]): true}
	node.votes = cluster.Votes{"b": b, "c": node.votes["c"]}
	got, _, _ := v.Changes()
	if st, ok := got[keys[3]]; len(got) != 1 || !ok || st.Healthy {
		t.Errorf("a peer's vote that takes one target out, Changes: %v", got)
	}
	// c sees keys[5] down too: out, by the vote alone.
	node.votes = cluster.Votes{"b": b, "c": {cluster.HealthID(keys[5]): true}}
	got, _, _ = v.Changes()
	if st, ok := got[keys[5]]; len(got) != 1 || !ok || st.Healthy {
		t.Errorf("a peer's vote that takes a target its checks pass out, Changes: %v", got)
	}
	node.votes = cluster.Votes{"b": b, "c": node.votes["c"]} // the same sets, a new map of them
	if got := changed(); len(got) != 0 {
		t.Errorf("the same votes again, Changes: %v", got)
	}
}
