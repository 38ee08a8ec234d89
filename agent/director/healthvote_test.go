package director

import (
	"bytes"
	"context"
	"fmt"
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
	id1, id2 := cluster.HealthID(rs1), cluster.HealthID(rs2)
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
		{"two directors disagree: a tie keeps it in", local(down, up), cluster.Votes{"b": downs()},
			true, "healthy by the directors' vote: 1 of 2 see it down (this director's checks fail: connection refused)"},
		{"two directors disagree the other way: a tie keeps it in", local(up, up), cluster.Votes{"b": downs(id1)}, true, ""},
		{"two of four down: a tie keeps it in", local(up, up), cluster.Votes{"b": downs(id1), "c": downs(id1), "d": downs()},
			true, ""},
		{"three of four down", local(up, up), cluster.Votes{"b": downs(id1), "c": downs(id1), "d": downs(id1)},
			false, "unhealthy by the directors' vote: 3 of 4 see it down"},
		{"one of four down", local(down, up), cluster.Votes{"b": downs(), "c": downs(), "d": downs()}, true, "1 of 4"},
		{"a vote for a target this director does not check", local(up, up), cluster.Votes{"b": downs(42)}, true, ""},
		{"this director alone sees every backend down: its vote does not count", local(down, down),
			cluster.Votes{"b": downs()},
			true, "healthy by the directors' vote: 0 of 1 see it down (this director's checks fail: connection refused; " +
				"it alone sees every backend down, so its vote does not count)"},
		{"a peer alone sees every backend down: its vote does not count", local(up, up),
			cluster.Votes{"b": downs(id1, id2), "c": downs(id1)}, true, ""},
		{"two see every backend down: both count", local(up, up),
			cluster.Votes{"b": downs(id1, id2), "c": downs(id1, id2)}, false, "2 of 3"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := maps.Clone(tc.local)
			got := decideHealth(tc.local, tc.votes)
			if !maps.Equal(tc.local, before) {
				t.Error("decideHealth changed its input")
			}
			if got[rs1].Healthy != tc.healthy1 {
				t.Errorf("rs1 healthy %v, want %v", got[rs1].Healthy, tc.healthy1)
			}
			overruled := got[rs1].Healthy != tc.local[rs1].Healthy
			if overruled != (tc.reason != "") || !strings.Contains(got[rs1].LastError, tc.reason) {
				t.Errorf("rs1's reason %q, want %q", got[rs1].LastError, tc.reason)
			}
		})
	}
}

// Every director of a cluster decides the same from the votes it hears
// over the cluster's fake: a backend is out only when a strict majority of
// the voters see it down, and a director that alone sees every backend of
// every service down does not count.
func TestHealthVoteAcrossDirectors(t *testing.T) {
	backends := []string{"web/10.0.0.11:80", "web/10.0.0.12:80", "mail/10.0.0.21:25"}
	const rs1, rs2, all, abstains = "web/10.0.0.11:80", "web/10.0.0.12:80", "all", "abstains"
	for _, tc := range []struct {
		name string
		seen []string // per director: the backends its checks see down, comma-separated; all; or abstains
		out  []string // the backends every voting director takes out
	}{
		{"one director: its checks decide", []string{rs1}, []string{rs1}},
		{"one director: all really down", []string{all}, backends},

		{"two: lone dissenter on one backend, a tie keeps it in", []string{rs1, ""}, nil},
		{"two: lone dissenter on all", []string{all, ""}, nil},
		{"two: both see one down", []string{rs1, rs1}, []string{rs1}},
		{"two: each sees a different one down", []string{rs1, rs2}, nil},
		{"two: all really down", []string{all, all}, backends},
		{"two: lone dissenter on all beside one down", []string{all, rs1}, []string{rs1}},
		{"two: abstaining peer, the other's checks decide", []string{rs1, abstains}, []string{rs1}},

		{"three: lone dissenter on one backend", []string{rs1, "", ""}, nil},
		{"three: lone dissenter on all", []string{all, "", ""}, nil},
		{"three: majority down", []string{rs1, rs1, ""}, []string{rs1}},
		{"three: all really down", []string{all, all, all}, backends},
		{"three: all really down, one director's checks not yet", []string{all, all, ""}, backends},
		{"three: lone dissenter on all is no casting vote", []string{all, rs1, ""}, nil},
		{"three: abstaining peer leaves a tie", []string{rs1, "", abstains}, nil},
		{"three: abstaining peer, majority down", []string{rs1, rs1, abstains}, []string{rs1}},
		{"three: abstaining peer, lone dissenter on all", []string{all, "", abstains}, nil},

		{"four: two of four down is a tie", []string{rs1, rs1, "", ""}, nil},
		{"four: three of four down", []string{rs1, rs1, rs1, ""}, []string{rs1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := cluster.NewFake(cluster.Rules{Mode: cluster.ECMP, Quorum: 1})
			nodes := make([]*cluster.FakeNode, len(tc.seen))
			locals := make([]map[string]health.State, len(tc.seen))
			for i, seen := range tc.seen {
				nodes[i] = f.Add(string(rune('a'+i)), 100)
				locals[i] = map[string]health.State{}
				for _, b := range backends {
					isDown := seen == all || slices.Contains(strings.Split(seen, ","), b)
					locals[i][b] = health.State{Healthy: !isDown, Known: true}
				}
			}
			for i, seen := range tc.seen {
				if seen == abstains {
					nodes[i].ShareHealth(nil)
					continue
				}
				down := []uint64{}
				for key, st := range locals[i] {
					if !st.Healthy {
						down = append(down, cluster.HealthID(key))
					}
				}
				nodes[i].ShareHealth(down)
			}
			for i, seen := range tc.seen {
				if seen == abstains {
					continue
				}
				var out []string
				for key, st := range decideHealth(locals[i], nodes[i].HealthVotes()) {
					if !st.Healthy {
						out = append(out, key)
					}
				}
				slices.Sort(out)
				want := slices.Sorted(slices.Values(tc.out))
				if !slices.Equal(out, want) {
					t.Errorf("director %d takes out %v, want %v", i+1, out, want)
				}
			}
		})
	}
}

// A director whose checks alone see every backend down says once why its
// vote does not count, and once when it counts again; one that names a
// peer whose vote does not count does the same.
func TestVotedHealthLogsADirectorThatDoesNotCount(t *testing.T) {
	const rs1, rs2 = "web/10.0.0.11:80", "web/10.0.0.12:80"
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, nil))
	local := &fakeChecks{states: map[string]health.State{rs1: {Healthy: false}, rs2: {Healthy: false}}, changed: make(chan struct{}, 1)}
	node := &fakeVoter{votes: cluster.Votes{"b": {}}, changed: make(chan struct{}, 1)}
	v := newVote(node, local, log)
	count := func(s string) int { return strings.Count(buf.String(), s) }

	for range 2 {
		if s := v.Snapshot(); !s[rs1].Healthy || !s[rs2].Healthy {
			t.Errorf("decided %v, want both healthy: the other director sees them up", s)
		}
	}
	if n := count("this director's checks alone see every backend down"); n != 1 {
		t.Errorf("logged %d times that this director's vote does not count, want once:\n%s", n, buf.String())
	}
	local.set(rs1, true)
	v.Snapshot()
	v.Snapshot()
	if n := count("this director's health vote counts again"); n != 1 {
		t.Errorf("logged %d times that this director's vote counts again, want once:\n%s", n, buf.String())
	}

	node.votes = cluster.Votes{"b": {cluster.HealthID(rs1): true, cluster.HealthID(rs2): true}}
	v.Snapshot()
	v.Snapshot()
	if n := count("peer=b"); n != 1 {
		t.Errorf("logged the peer whose vote does not count %d times, want once:\n%s", n, buf.String())
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
func (f *fakeChecks) States(keys []string, each func(int, health.State, bool)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for i, k := range keys {
		st, ok := f.states[k]
		each(i, st, ok)
	}
}

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
	v := newVote(node, local, slog.New(slog.DiscardHandler))
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
	// States, what the status and the metrics read, says what Snapshot does.
	var read []string
	v.States([]string{rs2, "web/10.0.0.99:80", rs1}, func(i int, st health.State, ok bool) {
		read = append(read, fmt.Sprint(i, st.Healthy, ok))
	})
	if want := []string{"0 true true", "1 false false", "2 false true"}; !slices.Equal(read, want) {
		t.Errorf("States: %q, want %q (rs2 up, no such target, rs1 down)", read, want)
	}
	if !v.overruled(rs1) || !v.overruled(rs2) {
		t.Error("not both overruled")
	}
	local.set(rs2, true)
	awaitSignal(t, v.Changed())
	if got := node.lastShared(); len(got) != 0 {
		t.Errorf("shared %v, want nothing down", got)
	}
	if s := v.Snapshot(); s[rs1].Healthy || !s[rs2].Healthy || v.overruled(rs2) {
		t.Errorf("decided rs1 %v rs2 %v overruled %v", s[rs1].Healthy, s[rs2].Healthy, v.overruled(rs2))
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
