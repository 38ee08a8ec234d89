package director

import (
	"fmt"
	"log/slog"
	"maps"
	"sync"
	"testing"

	"github.com/lvsd/lvsd/agent/health"
	"github.com/lvsd/lvsd/cluster"
)

// incrementalChecks are local health checks that, like health.Monitor,
// hand over only what changed since the last Changes.
type incrementalChecks struct {
	mu      sync.Mutex
	states  map[string]health.State
	dirty   map[string]bool
	all     bool // Changes hands every state over, as a checker that cannot tell what changed
	changed chan struct{}
}

func newIncrementalChecks(states map[string]health.State) *incrementalChecks {
	f := &incrementalChecks{states: states, dirty: map[string]bool{}, changed: make(chan struct{}, 1)}
	for key := range states {
		f.dirty[key] = true
	}
	return f
}

func (f *incrementalChecks) Set([]health.Target)                     {}
func (f *incrementalChecks) Update(map[string]bool, []health.Target) {}
func (f *incrementalChecks) Changed() <-chan struct{}                { return f.changed }

func (f *incrementalChecks) States(keys []string, each func(int, health.State, bool)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for i, k := range keys {
		st, ok := f.states[k]
		each(i, st, ok)
	}
}

func (f *incrementalChecks) Snapshot() map[string]health.State {
	f.mu.Lock()
	defer f.mu.Unlock()
	return maps.Clone(f.states)
}

func (f *incrementalChecks) Changes() (map[string]health.State, []string, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.all {
		clear(f.dirty)
		return maps.Clone(f.states), nil, true
	}
	states := make(map[string]health.State, len(f.dirty))
	var removed []string
	for key := range f.dirty {
		if st, ok := f.states[key]; ok {
			states[key] = st
		} else {
			removed = append(removed, key)
		}
	}
	clear(f.dirty) // as health.Monitor does: the map keeps its size
	return states, removed, false
}

func (f *incrementalChecks) set(key string, st health.State) {
	f.mu.Lock()
	f.states[key] = st
	f.dirty[key] = true
	f.mu.Unlock()
	select {
	case f.changed <- struct{}{}:
	default:
	}
}

func (f *incrementalChecks) remove(key string) {
	f.mu.Lock()
	delete(f.states, key)
	f.dirty[key] = true
	f.mu.Unlock()
}

// scaleKeys are the health keys of services x backends, as
// planner.HealthKey names them.
func scaleKeys(services, backends int) []string {
	keys := make([]string, 0, services*backends)
	for s := range services {
		for b := range backends {
			keys = append(keys, fmt.Sprintf("svc%05d/10.%d.%d.%d:80", s, 1+b, s/250, s%250+1))
		}
	}
	return keys
}

// The vote at 10,000 services x 10 checked backends, three directors:
// 1 % of the backends down everywhere, and one more flapping. A flap
// seen by this director alone is its checks' change taken in (and its
// vote shared) and the agent's Changes; seen by all is the same with the
// two peers' votes arriving too; a vote arriving is a peer's vote with
// one more target down, and back; and the agent's pass at every Check
// tick takes in what changed when nothing did.
func BenchmarkHealthVote(b *testing.B) {
	const services, backends = 10000, 10
	keys := scaleKeys(services, backends)
	down := health.State{Healthy: false, Known: true, LastError: "connection refused"}
	up := health.State{Healthy: true, Known: true, Weight: health.NoWeight}
	states := make(map[string]health.State, len(keys))
	peerDown := map[uint64]bool{}
	for i, key := range keys {
		states[key] = up
		if i%100 == 0 {
			states[key] = down
			peerDown[cluster.HealthID(key)] = true
		}
	}
	flapper := keys[1]
	withFlap := maps.Clone(peerDown)
	withFlap[cluster.HealthID(flapper)] = true
	steady := cluster.Votes{"b": peerDown, "c": maps.Clone(peerDown)}
	flapped := cluster.Votes{"b": withFlap, "c": maps.Clone(withFlap)}
	oneFlapped := cluster.Votes{"b": withFlap, "c": steady["c"]}

	setup := func(b *testing.B) (*votedHealth, *incrementalChecks, *fakeVoter) {
		local := newIncrementalChecks(states)
		node := &fakeVoter{votes: steady, changed: make(chan struct{}, 1)}
		v := newVote(node, local, slog.New(slog.DiscardHandler))
		v.takeLocal()
		v.Changes()
		b.ReportAllocs()
		b.ResetTimer()
		return v, local, node
	}
	b.Run("flap seen by this director", func(b *testing.B) {
		v, local, _ := setup(b)
		for i := range b.N {
			local.set(flapper, map[bool]health.State{true: down, false: up}[i%2 == 0])
			v.takeLocal()
			v.Changes()
		}
	})
	b.Run("flap seen by all", func(b *testing.B) {
		v, local, node := setup(b)
		for i := range b.N {
			flap := i%2 == 0
			local.set(flapper, map[bool]health.State{true: down, false: up}[flap])
			v.takeLocal()
			v.Changes()
			node.votes = map[bool]cluster.Votes{true: flapped, false: steady}[flap]
			v.Changes()
		}
	})
	b.Run("nothing changed, as at every Check tick", func(b *testing.B) {
		v, _, _ := setup(b)
		for range b.N {
			v.Changes()
		}
	})
	b.Run("a peer's vote arriving", func(b *testing.B) {
		v, _, node := setup(b)
		for i := range b.N {
			node.votes = map[bool]cluster.Votes{true: oneFlapped, false: steady}[i%2 == 0]
			v.Changes()
		}
	})
}
