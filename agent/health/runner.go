package health

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// runner checks one target. The goroutine of its round owns st, bad and
// results (one round runs at a time, handed on through the Monitor's
// queue under m.mu); the Monitor only sees the copies it publishes.
type runner struct {
	m        *Monitor
	t        Target
	checkers []Checker
	interval time.Duration // of rounds: the smallest check interval
	need     int           // passing checks for a passing round

	// Guarded by m.mu.
	next    time.Time          // of the round queued or running
	running bool               // a round runs
	stopped bool               // removed or replaced: no further round
	cancel  context.CancelFunc // aborts the running round

	st      State
	bad     map[string]bool // invalid weight values already logged
	results []Result
}

// maxBadLogged bounds how many distinct invalid weights are remembered per
// target; a backend sending a new bad value every time is logged this often
// and then no more.
const maxBadLogged = 16

func (m *Monitor) newRunner(t Target, st State) *runner {
	r := &runner{m: m, t: t, st: st, results: make([]Result, len(t.Checks))}
	for i := range r.t.Checks {
		c := &r.t.Checks[i]
		if r.interval == 0 || c.Interval < r.interval {
			r.interval = c.Interval
		}
		r.checkers = append(r.checkers, m.factory(&r.t, c))
	}
	if r.interval <= 0 {
		r.interval = time.Second // only reachable with unvalidated input
	}
	r.need = t.AtLeast
	if r.need <= 0 || r.need > len(t.Checks) {
		r.need = len(t.Checks)
	}
	return r
}

// stop ends r's rounds: the running one is aborted (its goroutine then
// closes the checkers); it reports whether none runs, so that the caller
// closes them. m.mu is held.
func (r *runner) stop() (idle bool) {
	r.stopped = true
	if r.running {
		r.cancel()
		return false
	}
	return true
}

// close releases what the checkers keep between rounds (connections).
func (r *runner) close() {
	for _, c := range r.checkers {
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
// leaves the outcomes in r.results. The first check runs on the loop's own
// goroutine, so a target with one check costs no extra goroutine.
func (r *runner) round(ctx context.Context) {
	run := func(i int) {
		cctx, cancel := context.WithTimeout(ctx, r.t.Checks[i].Timeout)
		r.results[i] = r.checkers[i].Check(cctx)
		cancel()
	}
	var wg sync.WaitGroup
	for i := 1; i < len(r.checkers); i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			run(i)
		}()
	}
	if len(r.checkers) > 0 {
		run(0)
	}
	wg.Wait()
}

// verdict says whether the round passed and, if it failed, why.
func (r *runner) verdict() (bool, string) {
	passed := 0
	var why []string
	for i, res := range r.results {
		if res.OK {
			passed++
			continue
		}
		why = append(why, r.checkName(i)+": "+res.Reason)
	}
	if passed >= r.need {
		return true, ""
	}
	if len(r.results) > 1 {
		why = append(why, fmt.Sprintf("%d of %d checks passed, %d needed", passed, len(r.results), r.need))
	}
	return false, strings.Join(why, "; ")
}

// checkName names check i in reasons: its type, and its port when it has
// one ("http :8080"); the target itself is named by the log's target key.
func (r *runner) checkName(i int) string {
	c := &r.t.Checks[i]
	if c.Type == "icmp" || c.Type == "exec" {
		return c.Type
	}
	return c.Type + " :" + strconv.Itoa(int(r.t.dst(c).Port()))
}

// record folds the round's results, which took took, into r.st, logs what
// changed and publishes the new State.
func (r *runner) record(took time.Duration) {
	if i := slices.IndexFunc(r.results, func(res Result) bool { return res.Local }); i >= 0 {
		r.m.noteLocal(r.t.Key, r.checkName(i)+": "+r.results[i].Reason)
		return
	}
	pass, reason := r.verdict()
	prev := r.st
	st, flipped := step(prev, pass, reason, r.t.Rise, r.t.Fall, r.t.StartDown, r.m.clock.Now())
	st.Weight = r.weight(prev.Weight)
	st.Rounds++
	if !pass {
		st.FailedRounds++
	}
	st.Durations.Observe(took)
	st.LastDuration = took
	if flipped && prev.Known {
		st.Transitions++
	}
	r.st = st

	log := r.m.log
	switch {
	case flipped && !st.Healthy:
		log.Info("target unhealthy", "event", "health", "target", r.t.Key, "healthy", false,
			"reason", reason, "first", !prev.Known)
	case flipped && prev.Known:
		log.Info("target healthy", "event", "health", "target", r.t.Key, "healthy", true,
			"reason", fmt.Sprintf("%d passing rounds", st.Passes))
	case flipped:
		// Healthy was assumed; the first round confirmed it. At debug
		// level because a start with 1,000 healthy targets would
		// otherwise log 1,000 lines that say nothing new.
		log.Debug("target healthy", "event", "health", "target", r.t.Key, "healthy", true,
			"reason", "first round passed", "first", true)
	}
	if st.Weight != prev.Weight {
		log.Info("target weight changed", "event", "weight", "target", r.t.Key,
			"weight", st.Weight, "previous", prev.Weight)
	}
	r.m.publish(r, st, flipped || st.Weight != prev.Weight)
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
func (r *runner) weight(prev int) int {
	for i, res := range r.results {
		if !r.t.Checks[i].WeightHeader || !res.HasWeight {
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
// misbehaving backend cannot flood the log.
func (r *runner) logBadWeight(v string) {
	if r.bad[v] || len(r.bad) >= maxBadLogged {
		return
	}
	if r.bad == nil {
		r.bad = make(map[string]bool)
	}
	r.bad[v] = true
	msg := "invalid weight header ignored"
	if len(r.bad) == maxBadLogged {
		msg += "; further invalid values of this target are not logged"
	}
	r.m.log.Warn(msg, "event", "weight_invalid", "target", r.t.Key, "value", v)
}
