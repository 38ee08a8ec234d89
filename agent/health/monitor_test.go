package health

import (
	"context"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// harness drives a Monitor with a fake clock, no jitter and scripted
// checkers (one per target key, shared by its checks).
type harness struct {
	t       *testing.T
	m       *Monitor
	clock   *fakeClock
	log     *logBuf
	mu      sync.Mutex
	scripts map[string]*script
	built   map[string]int // Factory calls per key
	rounds  int            // After calls expected so far
}

const tick = time.Second

func newHarness(t *testing.T) *harness {
	h := &harness{t: t, clock: newFakeClock(), scripts: map[string]*script{}, built: map[string]int{}}
	logger, buf := newTestLogger()
	h.log = buf
	h.m = NewMonitor(logger,
		WithClock(h.clock),
		WithJitter(func(time.Duration) time.Duration { return 0 }),
		WithFactory(func(tg *Target, c *Check) Checker {
			h.mu.Lock()
			defer h.mu.Unlock()
			h.built[tg.Key]++
			s := h.scripts[tg.Key]
			if s == nil {
				s = &script{results: []Result{pass}}
				h.scripts[tg.Key] = s
			}
			return s
		}))
	return h
}

func (h *harness) script(key string, rs ...Result) *script {
	h.mu.Lock()
	defer h.mu.Unlock()
	s := &script{results: rs}
	h.scripts[key] = s
	return s
}

func target(key string, rise, fall int) Target {
	return Target{Key: key, Port: 80, Rise: rise, Fall: fall,
		Checks: []Check{{Type: "tcp", Interval: tick, Timeout: tick / 2}}}
}

// round advances one interval and waits until n targets finished a round.
func (h *harness) round(n int) {
	h.clock.Advance(tick)
	h.rounds += n
	awaitRounds(h.t, h.m, h.rounds)
}

// start runs the Monitor and waits for the n targets' first rounds (which
// start at once: no jitter).
func (h *harness) start(n int) {
	runMonitor(h.t, h.m)
	h.rounds = n
	awaitRounds(h.t, h.m, n)
}

func (h *harness) state(key string) State {
	st, ok := h.m.Snapshot()[key]
	if !ok {
		h.t.Fatalf("no state for %s", key)
	}
	return st
}

func TestMonitorHysteresis(t *testing.T) {
	tests := []struct {
		name       string
		rise, fall int
		rounds     string // + pass, - fail
		want       string // H healthy, U unhealthy after each round
	}{
		{"first round passes", 2, 3, "+", "H"},
		{"first round fails: unhealthy at once", 2, 3, "-", "U"},
		{"fall 3", 2, 3, "+---", "HHHU"},
		{"rise 2 after a first failure", 2, 3, "-+-++", "UUUUH"},
		{"flaps absorbed by fall 2", 1, 2, "+-+-+-", "HHHHHH"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t)
			h.script("a", seq(tt.rounds)...)
			h.m.Set([]Target{target("a", tt.rise, tt.fall)})
			if st := h.state("a"); !st.Healthy || st.Known || st.Weight != NoWeight {
				t.Fatalf("before any round: %+v, want healthy, unknown, no weight", st)
			}
			h.start(1)
			var got strings.Builder
			for i := range tt.rounds {
				if i > 0 {
					h.round(1)
				}
				st := h.state("a")
				if !st.Known {
					t.Fatalf("round %d: not Known", i)
				}
				got.WriteString(map[bool]string{true: "H", false: "U"}[st.Healthy])
			}
			if got.String() != tt.want {
				t.Errorf("got %s, want %s", got.String(), tt.want)
			}
		})
	}
}

// A target with StartDown is unhealthy from the moment it is added, so the
// agent never gives it new connections before its checks pass rise rounds.
func TestMonitorStartDown(t *testing.T) {
	h := newHarness(t)
	h.script("a", seq("+-++")...)
	tg := target("a", 2, 3)
	tg.StartDown = true
	h.m.Set([]Target{tg})
	if st := h.state("a"); st.Healthy || st.Known {
		t.Fatalf("before any round: %+v, want unhealthy, unknown", st)
	}
	h.start(1)
	var got strings.Builder
	for i := range 4 {
		if i > 0 {
			h.round(1)
		}
		got.WriteString(map[bool]string{true: "H", false: "U"}[h.state("a").Healthy])
	}
	if got.String() != "UUUH" {
		t.Errorf("got %s, want UUUH", got.String())
	}
}

func TestMonitorLogsTransitions(t *testing.T) {
	h := newHarness(t)
	h.script("web/10.0.0.1:80", seq("+--++")...)
	h.m.Set([]Target{target("web/10.0.0.1:80", 2, 2)})
	h.start(1)
	for range 4 {
		h.round(1)
	}
	down := h.log.lines("level=INFO", "event=health", "target=web/10.0.0.1:80", "healthy=false", "reason=\"tcp :80: boom\"")
	up := h.log.lines("level=INFO", "event=health", "target=web/10.0.0.1:80", "healthy=true", "reason=")
	if len(down) != 1 || len(up) != 1 {
		t.Errorf("want one info line per transition, got down %q up %q\n%s", down, up, h.log)
	}
	if st := h.state("web/10.0.0.1:80"); !st.Healthy || st.LastError != "tcp :80: boom" || st.Passes != 2 {
		t.Errorf("state %+v", st)
	}
}

func TestMonitorChangedHints(t *testing.T) {
	h := newHarness(t)
	s := h.script("a", seq("+")...)
	tg := target("a", 1, 2)
	tg.Checks[0].WeightHeader = true
	h.m.Set([]Target{tg})
	if drain(h.m.Changed()) {
		t.Fatal("hint before any round")
	}
	h.start(1)
	if !drain(h.m.Changed()) {
		t.Error("no hint after the first round (Known changed)")
	}
	h.round(1)
	if drain(h.m.Changed()) {
		t.Error("hint after a round that changed nothing")
	}
	s.then(fail)
	h.round(1)
	if drain(h.m.Changed()) {
		t.Error("hint after one failure with fall 2 (no transition)")
	}
	h.round(1)
	if !drain(h.m.Changed()) {
		t.Error("no hint after the transition to unhealthy")
	}
	s.then(Result{OK: true, HasWeight: true, Weight: 7})
	h.round(1)
	if !drain(h.m.Changed()) {
		t.Error("no hint after recovery with a weight")
	}
	h.round(1)
	if drain(h.m.Changed()) {
		t.Error("hint although weight stayed 7")
	}
	s.then(Result{OK: true, HasWeight: true, Weight: 9})
	h.round(1)
	if !drain(h.m.Changed()) {
		t.Errorf("no hint after the weight changed: %+v\n%s", h.state("a"), h.log)
	}
}

func TestMonitorWeights(t *testing.T) {
	h := newHarness(t)
	s := h.script("a", Result{OK: true, HasWeight: true, Weight: 5})
	tg := target("a", 1, 1)
	tg.Checks[0].WeightHeader = true
	h.m.Set([]Target{tg})
	h.start(1)
	steps := []struct {
		res  Result
		want int
	}{
		{Result{OK: true, HasWeight: true, BadWeight: "abc"}, 5},        // ignored: previous stands
		{Result{OK: true, HasWeight: true, BadWeight: "abc"}, 5},        // same bad value: not logged again
		{Result{OK: true, HasWeight: true, BadWeight: "1001"}, 5},       // another bad value: logged
		{Result{Reason: "status 503"}, 5},                               // no response with a weight: kept
		{Result{OK: true, HasWeight: true, Weight: 0}, 0},               // zero is a weight
		{Result{OK: true, HasWeight: true, Weight: NoWeight}, NoWeight}, // header gone
	}
	if st := h.state("a"); st.Weight != 5 {
		t.Fatalf("weight %d after first round, want 5", st.Weight)
	}
	for i, step := range steps {
		s.then(step.res)
		h.round(1)
		if st := h.state("a"); st.Weight != step.want {
			t.Errorf("step %d: weight %d, want %d", i, st.Weight, step.want)
		}
	}
	if n := len(h.log.lines("event=weight_invalid", "value=abc")); n != 1 {
		t.Errorf("bad value abc logged %d times, want once", n)
	}
	if n := len(h.log.lines("event=weight_invalid", "value=1001")); n != 1 {
		t.Errorf("bad value 1001 logged %d times, want once", n)
	}
	if n := len(h.log.lines("event=weight target=a")); n != 3 {
		t.Errorf("%d weight change lines, want 3 (-1→5, 5→0, 0→-1):\n%s", n, h.log)
	}
}

func TestMonitorWeightsOnlyFromWeightChecks(t *testing.T) {
	h := newHarness(t)
	h.script("a", Result{OK: true, HasWeight: true, Weight: 5})
	h.m.Set([]Target{target("a", 1, 1)}) // WeightHeader not set
	h.start(1)
	if st := h.state("a"); st.Weight != NoWeight {
		t.Errorf("weight %d from a check without WeightHeader", st.Weight)
	}
}

func TestMonitorBadWeightLogBounded(t *testing.T) {
	h := newHarness(t)
	s := h.script("a", pass)
	tg := target("a", 1, 1)
	tg.Checks[0].WeightHeader = true
	h.m.Set([]Target{tg})
	h.start(1)
	for i := range 3 * maxBadLogged {
		s.then(Result{OK: true, HasWeight: true, BadWeight: "x" + string(rune('A'+i))})
		h.round(1)
	}
	if n := len(h.log.lines("event=weight_invalid")); n != maxBadLogged {
		t.Errorf("%d invalid-weight lines, want %d", n, maxBadLogged)
	}
}

func TestMonitorSet(t *testing.T) {
	h := newHarness(t)
	h.script("keep", seq("-")...)
	h.script("change", seq("-")...)
	h.script("drop", seq("+")...)
	h.m.Set([]Target{target("keep", 3, 3), target("change", 3, 3), target("drop", 3, 3)})
	h.start(3)
	for _, k := range []string{"keep", "change"} {
		if st := h.state(k); st.Healthy || !st.Known {
			t.Fatalf("%s: %+v, want known unhealthy", k, st)
		}
	}
	dropScript := h.scripts["drop"]
	dropCalls := dropScript.calls.Load()

	// "keep" is passed again unchanged (a fresh copy), "change" gets a new
	// fall, "drop" disappears and "new" appears.
	changed := target("change", 3, 4)
	h.m.Set([]Target{target("keep", 3, 3), changed, target("new", 3, 3)})
	snap := h.m.Snapshot()
	if _, ok := snap["drop"]; ok {
		t.Error("removed target still in the snapshot")
	}
	if st := snap["change"]; st.Healthy || !st.Known {
		t.Errorf("changed target lost its state: %+v", st)
	}
	// "new" starts its first round at once: the snapshot may come after it.
	if st := snap["new"]; !st.Healthy || (st.Known && st.Rounds == 0) {
		t.Errorf("new target: %+v, want healthy, and unknown before its first round", st)
	}
	if h.built["keep"] != 1 || h.built["change"] != 2 || h.built["new"] != 1 {
		t.Errorf("checkers built %v: want keep 1, change 2 (restarted), new 1", h.built)
	}
	// "change" and "new" start their first rounds at once; "keep" waits
	// for its slot.
	h.rounds += 2
	awaitRounds(t, h.m, h.rounds)
	h.round(3)
	h.round(3)
	if got := dropScript.calls.Load(); got != dropCalls {
		t.Errorf("removed target checked %d more times", got-dropCalls)
	}
	// The restarted target kept its hysteresis: still unhealthy after 3
	// rounds (rise 3 counts passing rounds; these fail).
	if st := h.state("change"); st.Healthy || st.Fails < 3 {
		t.Errorf("changed target: %+v", st)
	}
}

// Update replaces the targets of the groups named and nothing else: an
// unchanged target keeps its checker, a changed one is rebuilt, a missing
// one of those groups goes, and the other groups' targets stay untouched.
func TestMonitorUpdate(t *testing.T) {
	h := newHarness(t)
	in := func(group string, tg Target) Target { tg.Group = group; return tg }
	h.m.Set([]Target{in("a", target("a1", 1, 1)), in("a", target("a2", 1, 1)), in("b", target("b1", 1, 1))})
	h.m.Update(map[string]bool{"a": true}, []Target{in("a", target("a1", 1, 2)), in("a", target("a3", 1, 1)),
		in("c", target("c1", 1, 1))}) // c is not updated: ignored
	keys := func() []string { return slices.Sorted(maps.Keys(h.m.Snapshot())) }
	if got := keys(); !slices.Equal(got, []string{"a1", "a3", "b1"}) {
		t.Fatalf("after updating a: %v, want [a1 a3 b1]", got)
	}
	if h.built["a1"] != 2 || h.built["b1"] != 1 || h.built["a3"] != 1 || h.built["c1"] != 0 {
		t.Errorf("checkers built %v: want a1 2 (changed), b1 1 (another group), a3 1, c1 none", h.built)
	}
	// A target may move to another group; the group it left forgets it.
	h.m.Update(map[string]bool{"a": true, "b": true}, []Target{in("b", target("a1", 1, 2))})
	h.m.Update(map[string]bool{"a": true}, nil)
	if got := keys(); !slices.Equal(got, []string{"a1"}) {
		t.Fatalf("after a1 moved to b and a emptied: %v, want [a1]", got)
	}
	h.m.Update(map[string]bool{"b": true}, nil)
	if got := keys(); len(got) != 0 || len(h.m.groups) != 0 {
		t.Fatalf("after b emptied: %v, groups %v; want none", got, h.m.groups)
	}
}

func TestMonitorSetBeforeAndAfterRun(t *testing.T) {
	h := newHarness(t)
	h.m.Set([]Target{target("a", 1, 1)})
	h.start(1)
	h.m.Set([]Target{target("a", 1, 1), target("b", 1, 1)})
	h.rounds++
	awaitRounds(t, h.m, h.rounds)
	if st := h.state("b"); !st.Known {
		t.Errorf("target added while running did not run: %+v", st)
	}
}

func TestMonitorDuplicateKeys(t *testing.T) {
	h := newHarness(t)
	a := target("a", 1, 1)
	b := target("a", 5, 5)
	h.m.Set([]Target{a, b})
	if h.built["a"] != 1 {
		t.Errorf("built %d checkers for a duplicated key", h.built["a"])
	}
	if len(h.log.lines("duplicate health target", "target=a")) != 1 {
		t.Errorf("duplicate not logged:\n%s", h.log)
	}
}

func TestMonitorRunTwice(t *testing.T) {
	h := newHarness(t)
	h.start(0)
	waitFor(t, "Run to start", func() bool {
		h.m.mu.Lock()
		defer h.m.mu.Unlock()
		return h.m.started
	})
	if err := h.m.Run(context.Background()); err == nil {
		t.Error("second Run did not fail")
	}
}

func TestMonitorMultipleChecksConcurrently(t *testing.T) {
	// Three checks, each blocking until all three have started: a round
	// that ran them one after another would deadlock (and time out).
	clock := newFakeClock()
	var started sync.WaitGroup
	started.Add(3)
	m := NewMonitor(nil, WithClock(clock), WithJitter(func(time.Duration) time.Duration { return 0 }),
		WithFactory(func(*Target, *Check) Checker {
			return CheckerFunc(func(ctx context.Context) Result {
				started.Done()
				started.Wait()
				return pass
			})
		}))
	tg := target("a", 1, 1)
	tg.Checks = append(tg.Checks, tg.Checks[0], tg.Checks[0])
	m.Set([]Target{tg})
	runMonitor(t, m)
	awaitRounds(t, m, 1)
	if st := m.Snapshot()["a"]; !st.Healthy || !st.Known {
		t.Errorf("%+v", st)
	}
}

func TestMonitorJitterSpread(t *testing.T) {
	// The default jitter spreads the first rounds of 1,000 targets evenly
	// over the interval, and the slot grid keeps them apart: every slot
	// is used and none gets much more than its share (100 in 100 ms).
	const n = 1000
	clock := newFakeClock()
	var mu sync.Mutex
	var offsets []time.Duration
	m := NewMonitor(nil, WithClock(clock),
		WithJitter(func(d time.Duration) time.Duration {
			j := randomJitter(d)
			mu.Lock()
			offsets = append(offsets, j)
			mu.Unlock()
			return j
		}),
		WithFactory(func(*Target, *Check) Checker { return &script{results: []Result{pass}} }))
	var ts []Target
	for i := range n {
		ts = append(ts, target(fmt.Sprint("t", i), 1, 1))
	}
	m.Set(ts)
	runMonitor(t, m)
	waitFor(t, "every first round planned", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(offsets) == n
	})
	mu.Lock()
	defer mu.Unlock()
	const bins = 10
	var count [bins]int
	slots := map[time.Time]int{}
	for _, j := range offsets {
		if j < 0 || j >= tick {
			t.Fatalf("start offset %v outside [0, %v)", j, tick)
		}
		count[j*bins/tick]++
		slots[m.align(m.epoch.Add(j), tick)]++
	}
	for i, c := range count {
		// Expected 100 each; 50 is five standard deviations away.
		if c < 50 || c > 150 {
			t.Errorf("bin %d of %d holds %d of %d starts: %v", i, bins, c, n, count)
		}
	}
	if len(slots) != int(tick/maxSlot) {
		t.Errorf("starts fall on %d slots, want all %d", len(slots), tick/maxSlot)
	}
	for slot, c := range slots {
		if c > 150 {
			t.Errorf("%d of %d targets start in the slot at %v", c, n, slot.Sub(m.epoch))
		}
	}
}

func TestAlign(t *testing.T) {
	m := NewMonitor(nil, WithClock(newFakeClock()))
	ms := time.Millisecond
	tests := []struct {
		offset, interval, want time.Duration
	}{
		{0, tick, 0},
		{99 * ms, tick, 0},
		{100 * ms, tick, 100 * ms},
		{1234 * ms, tick, 1200 * ms},
		{1234 * ms, 500 * ms, 1200 * ms}, // 500/10 = 50 ms slots
		{1234 * ms, 200 * ms, 1220 * ms}, // short interval: slots of interval/10
		{1234 * ms, 5 * ms, 1234 * ms},   // below the resolution: no grid
	}
	for _, tt := range tests {
		if got := m.align(m.epoch.Add(tt.offset), tt.interval).Sub(m.epoch); got != tt.want {
			t.Errorf("align(%v, interval %v) = %v, want %v", tt.offset, tt.interval, got, tt.want)
		}
	}
}

func TestMonitorRoundsKeepPhase(t *testing.T) {
	clock := newFakeClock()
	m := NewMonitor(nil, WithClock(clock),
		WithJitter(func(time.Duration) time.Duration { return 300 * time.Millisecond }),
		WithFactory(func(*Target, *Check) Checker { return &script{results: []Result{pass}} }))
	m.Set([]Target{target("a", 1, 1)})
	runMonitor(t, m)
	awaitRounds(t, m, 0) // waiting for the jittered start
	clock.Advance(300 * time.Millisecond)
	awaitRounds(t, m, 1) // first round done, waiting for the next
	clock.mu.Lock()
	first, next := clock.delays[0], clock.delays[len(clock.delays)-1]
	clock.mu.Unlock()
	if first != 300*time.Millisecond || next != tick {
		t.Errorf("first round in %v, the next %v after it; want 300ms, %v", first, next, tick)
	}
}

// Every round is counted, failed ones apart, with its duration (the
// slowest check's): what lvsd's health-check metrics export.
func TestMonitorCountsRounds(t *testing.T) {
	clock := newFakeClock()
	results := seq("+--+")
	var calls int
	m := NewMonitor(nil, WithClock(clock), WithJitter(func(time.Duration) time.Duration { return 0 }),
		WithFactory(func(*Target, *Check) Checker {
			return CheckerFunc(func(context.Context) Result {
				clock.Advance(30 * time.Millisecond) // the check takes 30 ms
				calls++
				return results[min(calls, len(results))-1]
			})
		}))
	m.Set([]Target{target("a", 1, 1)})
	runMonitor(t, m)
	awaitRounds(t, m, 1)
	for i := 2; i <= len(results); i++ {
		clock.Advance(tick)
		awaitRounds(t, m, i)
	}
	st := m.Snapshot()["a"]
	if st.Rounds != 4 || st.FailedRounds != 2 || st.Durations.Count() != 4 || st.LastDuration != 30*time.Millisecond {
		t.Errorf("rounds %d, failed %d, durations %d, last %v; want 4, 2, 4, 30ms", st.Rounds, st.FailedRounds,
			st.Durations.Count(), st.LastDuration)
	}
	if b := st.Durations.Buckets(); b[0.025] != 0 || b[0.05] != 4 {
		t.Errorf("buckets %v: want all four rounds in le=0.05", b)
	}
}

// Changes hands over what Set, Update and the rounds changed since the
// last call, and nothing else: a round that keeps a target's health and
// weight is no change.
func TestMonitorChanges(t *testing.T) {
	h := newHarness(t)
	keysOf := func(states map[string]State, removed []string, _ ...bool) string {
		return fmt.Sprint(slices.Sorted(maps.Keys(states)), slices.Sorted(slices.Values(removed)))
	}
	h.script("b", seq("+-++++")...)
	h.m.Set([]Target{target("a", 1, 1), target("b", 1, 1)})
	states, removed, all := h.m.Changes()
	if got := keysOf(states, removed); got != "[a b] []" || all {
		t.Fatalf("after Set: %s (all %v), want [a b] []", got, all)
	}
	h.start(2) // both pass their first round: Known now
	if got := keysOf(h.m.Changes()); got != "[a b] []" {
		t.Fatalf("after the first round: %s, want [a b] []", got)
	}
	h.round(2) // b fails
	states, removed, _ = h.m.Changes()
	if got := keysOf(states, removed); got != "[b] []" || states["b"].Healthy {
		t.Fatalf("after b failed: %s %+v, want [b] [] unhealthy", got, states["b"])
	}
	h.round(2)
	h.round(2) // b passes twice: healthy again (rise 1: at the first)
	states, _, _ = h.m.Changes()
	if got := keysOf(states, nil); got != "[b] []" || !states["b"].Healthy {
		t.Fatalf("after b recovered: %s %+v, want [b] [] healthy", got, states["b"])
	}
	h.round(2)
	if got := keysOf(h.m.Changes()); got != "[] []" {
		t.Fatalf("after a round that changed nothing: %s, want [] []", got)
	}
	h.m.Set([]Target{target("b", 1, 1), target("c", 1, 1)})
	if got := keysOf(h.m.Changes()); got != "[c] [a]" {
		t.Fatalf("after a went and c came: %s, want [c] [a]", got)
	}
}

// States hands each key asked for its State as Snapshot has it, in the
// order asked, and ok false for a key that is no target: what the status
// and the metrics read instead of a copy of every target's.
func TestMonitorStates(t *testing.T) {
	h := newHarness(t)
	h.script("b", seq("+-")...)
	h.m.Set([]Target{target("a", 1, 1), target("b", 1, 1), target("c", 1, 1)})
	h.start(3)
	h.round(3) // b fails
	snap := h.m.Snapshot()
	for _, tc := range []struct {
		name string
		keys []string
	}{
		{"none", nil},
		{"one", []string{"b"}},
		{"all, out of order", []string{"c", "a", "b"}},
		{"missing among them", []string{"a", "x", "b", ""}},
		{"repeated", []string{"b", "b"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			calls := 0
			h.m.States(tc.keys, func(i int, st State, ok bool) {
				if i != calls {
					t.Errorf("call %d for key %d: keys are handed in order", calls, i)
				}
				calls++
				want, wantOK := snap[tc.keys[i]]
				if ok != wantOK || !reflect.DeepEqual(st, want) {
					t.Errorf("%q: %+v %v, want %+v %v", tc.keys[i], st, ok, want, wantOK)
				}
			})
			if calls != len(tc.keys) {
				t.Errorf("%d calls for %d keys", calls, len(tc.keys))
			}
		})
	}
	if snap["b"].Healthy || !snap["a"].Healthy || !snap["a"].Known {
		t.Errorf("a %+v, b %+v: want a known healthy, b unhealthy", snap["a"], snap["b"])
	}
}
