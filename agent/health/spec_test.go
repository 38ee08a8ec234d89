package health

import (
	"runtime"
	"testing"
	"time"
	"unsafe"
)

// A runner is held per target: 100,000 of them at the scale lvsd is built
// for. A field added should find its place in the spec, the check set or
// the Monitor first (BenchmarkMonitorStart measures the whole).
func TestRunnerSize(t *testing.T) {
	if n := unsafe.Sizeof(runner{}); n > 128 {
		t.Errorf("runner is %d bytes, want at most 128 (a size class of the allocator)", n)
	}
	if n := unsafe.Sizeof(status{}); n > 64 {
		t.Errorf("status is %d bytes, want at most 64", n)
	}
}

// Targets checked alike share their spec within a group and their check
// set across groups, whether or not the caller shares the slices; a
// target checked otherwise gets its own; and a check set no spec uses is
// forgotten.
func TestSpecsShared(t *testing.T) {
	m := NewMonitor(nil)
	tcp := func() []Check { return []Check{{Type: "tcp", Interval: tick, Timeout: tick / 2}} }
	shared := tcp()
	ts := []Target{
		{Key: "a/1", Group: "a", Port: 80, Rise: 1, Fall: 1, Checks: shared},
		{Key: "a/2", Group: "a", Port: 80, Rise: 1, Fall: 1, Checks: shared},
		{Key: "a/3", Group: "a", Port: 80, Rise: 1, Fall: 1, Checks: tcp()},
		{Key: "b/1", Group: "b", Port: 80, Rise: 1, Fall: 1, Checks: tcp()},
		{Key: "b/2", Group: "b", Port: 80, Rise: 2, Fall: 1, Checks: tcp()},
		{Key: "c/1", Group: "c", Port: 80, Rise: 1, Fall: 1, Checks: []Check{{Type: "tcp", Interval: 2 * tick, Timeout: tick}}},
	}
	m.Set(ts)
	spec := func(key string) *spec {
		m.mu.Lock()
		defer m.mu.Unlock()
		return m.runners[key].spec
	}
	if spec("a/1") != spec("a/2") || spec("a/1") != spec("a/3") {
		t.Error("targets of a group checked alike have specs of their own")
	}
	if spec("a/1") == spec("b/1") || spec("a/1").checkSet != spec("b/1").checkSet {
		t.Error("groups checked alike: want specs of their own sharing one check set")
	}
	if spec("b/1") == spec("b/2") || spec("b/1").checkSet != spec("b/2").checkSet {
		t.Error("another rise: want another spec with the same check set")
	}
	if spec("c/1").checkSet == spec("a/1").checkSet {
		t.Error("other checks share a check set")
	}
	if spec("a/1").probers == nil || spec("a/1").perTarget(0) {
		t.Error("a tcp check has no shared prober")
	}
	m.Set(nil)
	deadline := time.Now().Add(5 * time.Second)
	for {
		runtime.GC()
		m.checkSets.mu.Lock()
		n := len(m.checkSets.sets)
		m.checkSets.mu.Unlock()
		if n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d check sets kept after every target went", n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// The durations of rounds are kept per group: every target's State
// carries those of all its group's rounds, and a group that empties
// starts again from none.
func TestGroupDurations(t *testing.T) {
	h := newHarness(t)
	in := func(group string, tg Target) Target { tg.Group = group; return tg }
	h.m.Set([]Target{in("g", target("g1", 1, 1)), in("g", target("g2", 1, 1)), in("h", target("h1", 1, 1))})
	h.start(3)
	h.round(3)
	states := h.m.Snapshot()
	for key, want := range map[string]uint64{"g1": 4, "g2": 4, "h1": 2} {
		if got := states[key].Durations.Count(); got != want || states[key].Rounds != 2 {
			t.Errorf("%s: %d durations (rounds %d), want %d of its group's (2)", key, got, states[key].Rounds, want)
		}
	}
	h.m.Update(map[string]bool{"h": true}, nil)
	h.m.Update(map[string]bool{"h": true}, []Target{in("h", target("h1", 1, 1))})
	// Its first round may already have run: the durations are its own.
	if st := h.m.Snapshot()["h1"]; st.Durations.Count() != st.Rounds || st.Rounds > 1 {
		t.Errorf("h1 added again to an emptied group: %d durations, %d rounds; want its own only", st.Durations.Count(), st.Rounds)
	}
}
