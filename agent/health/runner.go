package health

import (
	"context"
	"fmt"
	"io"
	"math"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// runner checks one target. The goroutine of its round writes st (one
// round runs at a time, handed on through the Monitor's queue under m.mu),
// under m.mu, so that the Monitor reads it there. It is kept small: there
// is one per target, and 100,000 targets are a case lvsd is built for.
type runner struct {
	key  string
	addr netip.Addr
	port uint16
	// Guarded by m.mu; beside port, where they cost no padding.
	running bool // a round runs; m.cancels aborts it
	stopped bool // removed or replaced: no further round

	spec *spec
	// checkers are the target's own Checkers, by check; nil where the
	// spec's prober serves (all of them: nil). A pointer: most targets
	// have none, and a slice would cost each 24 bytes.
	checkers *[]Checker
	st       status // written by the round's goroutine under m.mu
}

// maxBadLogged bounds how many distinct invalid weights are remembered per
// target; a backend sending a new bad value every time is logged this often
// and then no more.
const maxBadLogged = 16

// newRunner returns the runner of t, checked as s says, in state st.
func (m *Monitor) newRunner(t *Target, s *spec, st status) *runner {
	r := &runner{key: t.Key, addr: t.Addr, port: t.Port, spec: s, st: st}
	for i := range s.checks {
		if !s.perTarget(i) {
			continue
		}
		if r.checkers == nil {
			cs := make([]Checker, len(s.checks))
			r.checkers = &cs
		}
		tg := r.target() // the factory may keep none of it but Key, Addr and Port
		(*r.checkers)[i] = m.factory(&tg, &s.checks[i])
	}
	return r
}

// target is r's Target, as it was handed over (but for its own slices).
func (r *runner) target() Target {
	s := r.spec
	return Target{Key: r.key, Group: s.group, Addr: r.addr, Port: r.port, Checks: s.checks, AtLeast: s.atLeast,
		Rise: s.rise, Fall: s.fall, StartDown: s.startDown}
}

// dst is where check i of r goes.
func (r *runner) dst(i int) netip.AddrPort {
	port := r.port
	if c := &r.spec.checks[i]; c.Port != 0 {
		port = c.Port
	}
	return netip.AddrPortFrom(r.addr.Unmap(), port)
}

// stop ends r's rounds: the running one is aborted (its goroutine then
// closes the checkers); it reports whether none runs, so that the caller
// closes them. m.mu is held.
func (r *runner) stop() (idle bool) {
	r.stopped = true
	delete(r.spec.m.badWeights, r)
	if r.running {
		r.spec.m.cancels[r]()
		return false
	}
	return true
}

// close releases what the checkers keep between rounds (connections).
func (r *runner) close() {
	if r.checkers == nil {
		return
	}
	for _, c := range *r.checkers {
		if cl, ok := c.(io.Closer); ok {
			cl.Close()
		}
	}
}

// nextSlot is the first round time after now on the grid prev + k*interval.
// A round that overran (a check's timeout is longer than the round
// interval, or the machine stalled) skips the missed slots instead of
// running them back to back.
func nextSlot(prev time.Time, interval time.Duration, now time.Time) time.Time {
	next := prev.Add(interval)
	if next.After(now) {
		return next
	}
	return next.Add((now.Sub(next)/interval + 1) * interval)
}

// round runs every check concurrently, each under its own timeout, and
// returns their outcomes. The first check runs on the loop's own
// goroutine, so a target with one check costs no extra goroutine. The
// results are made per round: kept per target they would cost every idle
// target their memory.
func (r *runner) round(ctx context.Context) []Result {
	checks := r.spec.checks
	results := make([]Result, len(checks))
	run := func(i int) {
		cctx, cancel := context.WithTimeout(ctx, checks[i].Timeout)
		if r.spec.perTarget(i) {
			results[i] = (*r.checkers)[i].Check(cctx)
		} else {
			results[i] = r.spec.probers[i].probe(cctx, r.dst(i))
		}
		cancel()
	}
	var wg sync.WaitGroup
	for i := 1; i < len(checks); i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			run(i)
		}()
	}
	if len(checks) > 0 {
		run(0)
	}
	wg.Wait()
	return results
}

// verdict says whether the round passed and, if it failed, why.
func (r *runner) verdict(results []Result) (bool, string) {
	passed, need := 0, r.spec.need
	var why []string
	for i, res := range results {
		if res.OK {
			passed++
			continue
		}
		why = append(why, r.checkName(i)+": "+res.Reason)
	}
	if passed >= need {
		return true, ""
	}
	if len(results) > 1 {
		why = append(why, fmt.Sprintf("%d of %d checks passed, %d needed", passed, len(results), need))
	}
	return false, strings.Join(why, "; ")
}

// checkName names check i in reasons: its type, and its port when it has
// one ("http :8080"); the target itself is named by the log's target key.
func (r *runner) checkName(i int) string {
	c := &r.spec.checks[i]
	if c.Type == "icmp" || c.Type == "exec" {
		return c.Type
	}
	return c.Type + " :" + strconv.Itoa(int(r.dst(i).Port()))
}

// record folds the round's results, which took took, into r.st, logs what
// changed and publishes the new State.
func (r *runner) record(results []Result, took time.Duration) {
	m, s := r.spec.m, r.spec
	if i := slices.IndexFunc(results, func(res Result) bool { return res.Local }); i >= 0 {
		m.noteLocal(r.key, r.checkName(i)+": "+results[i].Reason)
		return
	}
	pass, reason := r.verdict(results)
	prev := m.stateOf(r.st, nil) // read without m.mu: this goroutine is its only writer
	st, flipped := step(prev, pass, reason, s.rise, s.fall, s.startDown, m.clock.Now())
	st.Weight = r.weight(results, prev.Weight)
	st.Rounds++
	if !pass {
		st.FailedRounds++
	}
	st.LastDuration = took
	if flipped && prev.Known {
		st.Transitions++
	}

	log := m.log
	switch {
	case flipped && !st.Healthy:
		log.Info("target unhealthy", "event", "health", "target", r.key, "healthy", false,
			"reason", reason, "first", !prev.Known)
	case flipped && prev.Known:
		log.Info("target healthy", "event", "health", "target", r.key, "healthy", true,
			"reason", fmt.Sprintf("%d passing rounds", st.Passes))
	case flipped:
		// Healthy was assumed; the first round confirmed it. At debug
		// level because a start with 1,000 healthy targets would
		// otherwise log 1,000 lines that say nothing new.
		log.Debug("target healthy", "event", "health", "target", r.key, "healthy", true,
			"reason", "first round passed", "first", true)
	}
	if st.Weight != prev.Weight {
		log.Info("target weight changed", "event", "weight", "target", r.key,
			"weight", st.Weight, "previous", prev.Weight)
	}
	m.publish(r, m.statusOf(st), took, flipped || st.Weight != prev.Weight)
}

// step folds one round into st. The first round decides at once, unless
// startDown: then the target is unhealthy until rise passing rounds, the
// first included. After that a healthy target needs fall failing rounds in
// a row to become unhealthy and an unhealthy one rise passing rounds to
// come back. It reports whether Healthy changed, or Known by a first round
// that decided.
func step(st State, pass bool, reason string, rise, fall int, startDown bool, now time.Time) (State, bool) {
	if pass {
		st.Passes++
		st.Fails = 0
	} else {
		st.Fails++
		st.Passes = 0
		st.LastError = reason
	}
	flip := false
	switch {
	case !st.Known && !startDown:
		st.Known = true
		flip = true
	case !st.Known:
		st.Known = true
		flip = pass && st.Passes >= max(rise, 1)
	case st.Healthy && !pass && st.Fails >= max(fall, 1):
		flip = true
	case !st.Healthy && pass && st.Passes >= max(rise, 1):
		flip = true
	}
	if flip {
		st.Healthy = pass
		st.Since = now
	}
	return st, flip
}

// weight returns the target's weight after this round: the value reported
// by the first check with WeightHeader that got a response passing its
// status check. When no such response came (timeouts, bad status) or the
// value was invalid, the previous weight stands; a response without the
// header means the backend no longer asks for a weight (NoWeight).
func (r *runner) weight(results []Result, prev int) int {
	for i, res := range results {
		if !r.spec.checks[i].WeightHeader || !res.HasWeight {
			continue
		}
		if res.BadWeight != "" {
			r.logBadWeight(res.BadWeight)
			return prev
		}
		return res.Weight
	}
	return prev
}

// logBadWeight logs an invalid weight value once per distinct value, so a
// misbehaving backend cannot flood the log. The values logged are kept by
// the Monitor, not the runner: few targets ever send one.
func (r *runner) logBadWeight(v string) {
	m := r.spec.m
	m.mu.Lock()
	bad := m.badWeights[r]
	logIt := !r.stopped && !bad[v] && len(bad) < maxBadLogged
	if logIt {
		if bad == nil {
			bad = make(map[string]bool)
			m.badWeights[r] = bad
		}
		bad[v] = true
	}
	last := len(bad) == maxBadLogged
	m.mu.Unlock()
	if !logIt {
		return
	}
	msg := "invalid weight header ignored"
	if last {
		msg += "; further invalid values of this target are not logged"
	}
	m.log.Warn(msg, "event", "weight_invalid", "target", r.key, "value", v)
}

// status is a target's State as its runner keeps it: what status, the
// metrics and the hysteresis need, in 64 bytes instead of State's 250 (its
// durations are its group's, its counters saturate or wrap far beyond a
// director's lifetime).
type status struct {
	healthy, known bool
	weight         int16
	passes, fails  int32 // saturated
	transitions    uint32
	since          time.Duration // from m.epoch
	lastError      string
	rounds, failed uint64
	lastDuration   time.Duration
}

// stateOf is st as a State, with the durations of its group g (nil: none).
func (m *Monitor) stateOf(st status, g *group) State {
	out := State{Healthy: st.healthy, Known: st.known, Weight: int(st.weight), Since: m.epoch.Add(st.since),
		LastError: st.lastError, Passes: int(st.passes), Fails: int(st.fails), Rounds: st.rounds,
		FailedRounds: st.failed, Transitions: uint64(st.transitions), LastDuration: st.lastDuration}
	if g != nil {
		out.Durations = g.durations
	}
	return out
}

// statusOf is st as a runner keeps it.
func (m *Monitor) statusOf(st State) status {
	return status{healthy: st.Healthy, known: st.Known, weight: int16(max(min(st.Weight, math.MaxInt16), math.MinInt16)),
		passes: int32(min(st.Passes, math.MaxInt32)), fails: int32(min(st.Fails, math.MaxInt32)),
		transitions: uint32(st.Transitions), since: st.Since.Sub(m.epoch), lastError: st.LastError,
		rounds: st.Rounds, failed: st.FailedRounds, lastDuration: st.LastDuration}
}
