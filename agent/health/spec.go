package health

import (
	"bytes"
	"fmt"
	"hash/fnv"
	"runtime"
	"slices"
	"sync"
	"time"
	"weak"

	"github.com/lvsd/lvsd/agent/histogram"
)

// Memory. What the targets of a group have in common (rise, fall and
// at-least, the group's name) is held once, in a spec shared by pointer;
// their checks once for every group checked alike, in a check set; and
// the checks that keep nothing per target (tcp, udp, dns, icmp) are run by
// a prober shared by all the targets of a check set. A target then costs its
// key, address and port, a pointer to its spec, a compact state and, for
// http, https and exec checks, its own checkers: at 100,000 targets with a
// tcp check, under 300 bytes each instead of 1,300.

// spec is what the targets of a group checked alike share. It is
// immutable once made: a target whose checks change gets another spec.
type spec struct {
	*checkSet // shared with the specs of other groups with equal checks
	m         *Monitor
	group     string
	atLeast   int
	rise      int
	fall      int
	startDown bool
	need      int // passing checks for a passing round
}

// checkSet is a list of checks and what is made of them once, shared by
// every spec whose checks are equal: most services are checked alike, and
// a Check is some 350 bytes.
type checkSet struct {
	checks   []Check       // a deep copy of the caller's, owned by the set
	interval time.Duration // of rounds: the smallest check interval
	// probers holds, per check, the one prober of every target of the
	// set, or nil where each target needs a Checker of its own.
	probers []prober
}

// newSpec makes the spec of t, copying what it takes of t.
func (m *Monitor) newSpec(t *Target) *spec {
	s := &spec{checkSet: m.checkSetOf(t.Checks), m: m, group: t.Group, atLeast: t.AtLeast, rise: t.Rise,
		fall: t.Fall, startDown: t.StartDown}
	s.need = t.AtLeast
	if s.need <= 0 || s.need > len(s.checks) {
		s.need = len(s.checks)
	}
	return s
}

// checkSets are the check sets in use, by checksOf, found again while a
// spec uses them and forgotten once none does (weak pointers): a reload
// that changes the checks of a service leaves nothing behind.
type checkSets struct {
	mu   sync.Mutex // guards sets; not m.mu: cleanups take it on their own goroutine
	sets map[uint64][]weak.Pointer[checkSet]
}

// checkSetOf returns the check set equal to checks, made if none is in use.
func (m *Monitor) checkSetOf(checks []Check) *checkSet {
	h := hashChecks(checks)
	cs := &m.checkSets
	cs.mu.Lock()
	defer cs.mu.Unlock()
	for _, w := range cs.sets[h] {
		if set := w.Value(); set != nil && slices.EqualFunc(set.checks, checks, equalCheck) {
			return set
		}
	}
	set := m.newCheckSet(checks)
	w := weak.Make(set)
	if cs.sets == nil {
		cs.sets = map[uint64][]weak.Pointer[checkSet]{}
	}
	cs.sets[h] = append(cs.sets[h], w)
	runtime.AddCleanup(set, func(h uint64) {
		cs.mu.Lock()
		defer cs.mu.Unlock()
		live := slices.DeleteFunc(cs.sets[h], func(w weak.Pointer[checkSet]) bool { return w.Value() == nil })
		if len(live) == 0 {
			delete(cs.sets, h)
		} else {
			cs.sets[h] = live
		}
	}, h)
	return set
}

func (m *Monitor) newCheckSet(checks []Check) *checkSet {
	set := &checkSet{checks: cloneChecks(checks)}
	for i := range set.checks {
		if c := &set.checks[i]; set.interval == 0 || c.Interval < set.interval {
			set.interval = c.Interval
		}
	}
	if set.interval <= 0 {
		set.interval = time.Second // only reachable with unvalidated input
	}
	if m.ownFactory {
		return set
	}
	for i := range set.checks {
		p := m.newProber(&set.checks[i])
		if p == nil {
			continue
		}
		if set.probers == nil {
			set.probers = make([]prober, len(set.checks))
		}
		set.probers[i] = p
	}
	return set
}

// hashChecks hashes what tells most checks apart; equal checks have equal
// hashes, and checkSetOf compares all of them.
func hashChecks(checks []Check) uint64 {
	h := fnv.New64a()
	for i := range checks {
		c := &checks[i]
		fmt.Fprintf(h, "%s|%d|%d|%d|%s|%s|%s|%s|%d;", c.Type, c.Port, c.Interval, c.Timeout, c.Method, c.Path,
			c.Host, c.Query, len(c.Command))
	}
	return h.Sum64()
}

// matches reports whether t would be checked as s's targets are, so that
// Set can leave an unchanged target running.
func (s *spec) matches(t *Target) bool {
	return s.group == t.Group && s.atLeast == t.AtLeast && s.rise == t.Rise && s.fall == t.Fall &&
		s.startDown == t.StartDown && slices.EqualFunc(s.checks, t.Checks, equalCheck)
}

// perTarget reports whether check i needs a Checker of each target's own.
func (s *checkSet) perTarget(i int) bool { return s.probers == nil || s.probers[i] == nil }

// specKey identifies the checks a caller handed over by their storage: a
// caller that gives the targets of a service one slice of checks (the
// agent does) has their spec found by one comparison per service, not
// one per target.
type specKey struct {
	group     string
	checks    *Check
	n         int
	atLeast   int
	rise      int
	fall      int
	startDown bool
}

func keyOf(t *Target) specKey {
	k := specKey{group: t.Group, n: len(t.Checks), atLeast: t.AtLeast, rise: t.Rise, fall: t.Fall, startDown: t.StartDown}
	if len(t.Checks) > 0 {
		k.checks = &t.Checks[0]
	}
	return k
}

// specs finds or makes the specs of the targets of one Set or Update.
type specs struct {
	m       *Monitor
	byKey   map[specKey]*spec
	byGroup map[string][]*spec // made or found so far, for callers that do not share checks
}

func (m *Monitor) specFinder() *specs {
	return &specs{m: m, byKey: map[specKey]*spec{}, byGroup: map[string][]*spec{}}
}

// of returns the spec of t: old's when t is checked as before, else one
// already found for a target of its group checked alike, else a new one.
func (f *specs) of(t *Target, old *spec) *spec {
	k := keyOf(t)
	if s := f.byKey[k]; s != nil {
		return s
	}
	var s *spec
	if old != nil && old.matches(t) {
		s = old
	}
	for _, c := range f.byGroup[t.Group] {
		if s == nil && c.matches(t) {
			s = c
		}
	}
	if s == nil {
		s = f.m.newSpec(t)
	}
	if !slices.Contains(f.byGroup[t.Group], s) {
		f.byGroup[t.Group] = append(f.byGroup[t.Group], s)
	}
	f.byKey[k] = s
	return s
}

// group is what the Monitor keeps of a Target.Group: its targets, for
// Update, and the durations of their rounds, which lvsd exports per
// service (its group), not per backend: one histogram per group instead
// of one per target.
type group struct {
	members   []*runner
	durations histogram.Durations
}

// without returns rs without r, in place.
func without(rs []*runner, r *runner) []*runner {
	if i := slices.Index(rs, r); i >= 0 {
		rs[i] = rs[len(rs)-1]
		rs[len(rs)-1] = nil
		rs = rs[:len(rs)-1]
	}
	return rs
}

// cloneChecks deep-copies cs so that the caller may reuse its slices.
func cloneChecks(cs []Check) []Check {
	cs = slices.Clone(cs)
	for i := range cs {
		c := &cs[i]
		c.Send = bytes.Clone(c.Send)
		c.ExpectData = bytes.Clone(c.ExpectData)
		c.Command = slices.Clone(c.Command)
		c.TLSRootCAs = bytes.Clone(c.TLSRootCAs)
		if u := c.ExecUser; u != nil {
			cu := *u
			cu.Groups = slices.Clone(u.Groups)
			c.ExecUser = &cu
		}
	}
	return cs
}
