package director

import (
	"context"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lvsd/lvsd/agent"
	"github.com/lvsd/lvsd/agent/config"
	"github.com/lvsd/lvsd/agent/health"
	"github.com/lvsd/lvsd/cluster"
)

func TestDecideHealth(t *testing.T) {
	const rs1, rs2 = "web/10.0.0.11:80", "web/10.0.0.12:80"
	id1 := cluster.HealthID(rs1)
	up := health.State{Healthy: true, Known: true}
	down := health.State{Healthy: false, Known: true, LastError: "connection refused"}
	local := func(s1, s2 health.State) map[string]health.State { return map[string]health.State{rs1: s1, rs2: s2} }
	downs := func(ids ...uint64) map[uint64]bool {
		m := map[uint64]bool{}
		for _, id := range ids {
			m[id] = true
		}
		return m
	}
	for _, tc := range []struct {
		name     string
		local    map[string]health.State
		votes    cluster.Votes
		healthy1 bool   // rs1's verdict (rs2 is up everywhere)
		reason   string // in rs1's LastError when overruled
	}{
		{"alone: the local checks decide", local(down, up), nil, false, ""},
		{"all agree up", local(up, up), cluster.Votes{"b": downs(), "c": downs()}, true, ""},
		{"reachable from this director only", local(up, up), cluster.Votes{"b": downs(id1), "c": downs(id1)},
			false, "unhealthy by the directors' vote: 2 of 3 see it down (this director's checks pass)"},
		{"unreachable from this director only", local(down, up), cluster.Votes{"b": downs(), "c": downs()},
			true, "healthy by the directors' vote: 1 of 3 see it down (this director's checks fail: connection refused)"},
		{"two directors disagree: a tie is down", local(up, up), cluster.Votes{"b": downs(id1)},
			false, "unhealthy by the directors' vote: 1 of 2 see it down"},
		{"two of four down: a tie is down", local(up, up), cluster.Votes{"b": downs(id1), "c": downs(id1), "d": downs()},
			false, "2 of 4"},
		{"one of four down", local(down, up), cluster.Votes{"b": downs(), "c": downs(), "d": downs()}, true, "1 of 4"},
		{"a vote for a target this director does not check", local(up, up), cluster.Votes{"b": downs(42)}, true, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := maps.Clone(tc.local)
			got := decideHealth(tc.local, tc.votes)
			if !maps.Equal(tc.local, before) {
				t.Error("decideHealth changed its input")
			}
			if got[rs1].Healthy != tc.healthy1 || !got[rs2].Healthy {
				t.Errorf("rs1 healthy %v, rs2 %v; want %v, true", got[rs1].Healthy, got[rs2].Healthy, tc.healthy1)
			}
			overruled := got[rs1].Healthy != tc.local[rs1].Healthy
			if overruled != (tc.reason != "") || !strings.Contains(got[rs1].LastError, tc.reason) {
				t.Errorf("rs1's reason %q, want %q", got[rs1].LastError, tc.reason)
			}
		})
	}
}

// fakeVoter is a cluster node's side of the vote.
type fakeVoter struct {
	mu      sync.Mutex
	shared  [][]uint64
	votes   cluster.Votes
	changed chan struct{}
}

func (f *fakeVoter) ShareHealth(down []uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.shared = append(f.shared, slices.Sorted(slices.Values(down)))
}

func (f *fakeVoter) HealthVotes() cluster.Votes {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.votes
}

func (f *fakeVoter) HealthVotesChanged() <-chan struct{} { return f.changed }

func (f *fakeVoter) setVotes(v cluster.Votes) {
	f.mu.Lock()
	f.votes = v
	f.mu.Unlock()
	f.changed <- struct{}{}
}

func (f *fakeVoter) lastShared() []uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.shared) == 0 {
		return nil
	}
	return f.shared[len(f.shared)-1]
}

// fakeChecks are local health checks whose states the test sets.
type fakeChecks struct {
	mu      sync.Mutex
	states  map[string]health.State
	changed chan struct{}
}

func (f *fakeChecks) Set([]health.Target)                     {}
func (f *fakeChecks) Update(map[string]bool, []health.Target) {}
func (f *fakeChecks) Snapshot() map[string]health.State {
	f.mu.Lock()
	defer f.mu.Unlock()
	return maps.Clone(f.states)
}
func (f *fakeChecks) Changed() <-chan struct{} { return f.changed }
func (f *fakeChecks) Changes() (map[string]health.State, []string, bool) {
	return f.Snapshot(), nil, true
}
func (f *fakeChecks) set(key string, healthy bool) {
	f.mu.Lock()
	f.states[key] = health.State{Healthy: healthy, Known: true}
	f.mu.Unlock()
	// A hint, as health.Monitor gives it: one pending at most, never a
	// wait (a blocking send deadlocked TestFollowTrack when followTrack
	// read the next change early and waited to hand its verdict over).
	select {
	case f.changed <- struct{}{}:
	default:
	}
}

// awaitSignal waits for the agent's change signal (a liveness bound, not
// a timing assertion).
func awaitSignal(t *testing.T, ch <-chan struct{}) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Fatal("no change signal")
	}
}

// The vote shares what the local checks see down, and the agent hears of
// every change of the local checks or of the peers' votes.
func TestVotedHealth(t *testing.T) {
	const rs1, rs2 = "web/10.0.0.11:80", "web/10.0.0.12:80"
	local := &fakeChecks{states: map[string]health.State{rs1: {Healthy: true}, rs2: {Healthy: true}}, changed: make(chan struct{}, 1)}
	node := &fakeVoter{changed: make(chan struct{}, 1)}
	v := &votedHealth{local: local, node: node, log: slog.New(slog.DiscardHandler), changed: make(chan struct{}, 1), overruled: map[string]bool{}}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { v.run(ctx) })
	defer func() { cancel(); wg.Wait() }()

	local.set(rs2, false)
	awaitSignal(t, v.Changed())
	if got, want := node.lastShared(), []uint64{cluster.HealthID(rs2)}; !slices.Equal(got, want) {
		t.Errorf("shared %v, want %v (rs2)", got, want)
	}
	// Two peers see rs1 down, and rs2 up.
	node.setVotes(cluster.Votes{"b": {cluster.HealthID(rs1): true}, "c": {cluster.HealthID(rs1): true}})
	awaitSignal(t, v.Changed())
	if s := v.Snapshot(); s[rs1].Healthy || !s[rs2].Healthy {
		t.Errorf("decided rs1 %v rs2 %v, want down and up", s[rs1].Healthy, s[rs2].Healthy)
	}
	if !v.overruled[rs1] || !v.overruled[rs2] {
		t.Errorf("overruled %v, want both", v.overruled)
	}
	local.set(rs2, true)
	awaitSignal(t, v.Changed())
	if got := node.lastShared(); len(got) != 0 {
		t.Errorf("shared %v, want nothing down", got)
	}
	if s := v.Snapshot(); s[rs1].Healthy || !s[rs2].Healthy || v.overruled[rs2] {
		t.Errorf("decided rs1 %v rs2 %v overruled %v", s[rs1].Healthy, s[rs2].Healthy, v.overruled)
	}
}

// Over the cluster's fake, as over its node, a director in mode ecmp
// votes: its peers' votes decide, and outside ecmp the local checks do.
func TestVotedHealthOverFakeCluster(t *testing.T) {
	const rs1 = "web/10.0.0.11:80"
	cfg := func(mode config.ClusterMode) *agent.LoadedConfig {
		return &agent.LoadedConfig{Agent: &config.Agent{Cluster: &config.Cluster{Mode: mode}}}
	}
	f := cluster.NewFake(cluster.Rules{Mode: cluster.ECMP, Quorum: 1})
	d1, d2, d3 := f.Add("d1", 100), f.Add("d2", 100), f.Add("d3", 100)
	local := &fakeChecks{states: map[string]health.State{rs1: {Healthy: true, Known: true}}, changed: make(chan struct{}, 1)}
	if v := newVotedHealth(cfg(config.ModeActiveStandby), d1, local, slog.New(slog.DiscardHandler)); v != nil {
		t.Error("a vote outside mode ecmp")
	}
	v := newVotedHealth(cfg(config.ModeECMP), d1, local, slog.New(slog.DiscardHandler))
	if v == nil {
		t.Fatal("no vote in mode ecmp over the fake cluster")
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { v.run(ctx) })
	defer func() { cancel(); wg.Wait() }()
	d2.ShareHealth([]uint64{cluster.HealthID(rs1)})
	d3.ShareHealth([]uint64{cluster.HealthID(rs1)})
	for deadline := time.Now().Add(10 * time.Second); v.Snapshot()[rs1].Healthy; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("two peers voting rs1 down did not overrule this director's checks")
		}
	}
}
