package health

import (
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"net"
	"slices"
	"sync"
	"time"
)

// Monitor checks a set of targets and keeps their State. Set, Changed and
// Snapshot are safe from any goroutine; Run must be called once.
type Monitor struct {
	log     *slog.Logger
	clock   Clock
	dialer  Dialer
	jitter  func(interval time.Duration) time.Duration
	factory Factory
	// ownFactory: the factory was given (WithFactory) and builds every
	// check's Checker; else the checks that keep nothing per target are
	// run by their spec's probers.
	ownFactory bool
	checkSets  checkSets
	icmp       *pingers
	reuse      int       // rounds an HTTP connection serves
	epoch      time.Time // origin of the slot grid

	changed chan struct{} // 1-buffered hint
	wake    chan struct{} // 1-buffered: the queue's head moved earlier
	// slots holds a value per check in flight (WithMaxInFlight).
	slots       chan struct{}
	maxInFlight int

	wg sync.WaitGroup // the rounds running

	mu      sync.Mutex // guards the following fields
	started bool       // Run was called
	stopped bool       // Run returned
	runners map[string]*runner
	// groups are the targets of each Target.Group, for Update, and their
	// rounds' durations.
	groups map[string]*group
	// cancels abort the rounds running, by runner: kept here, not in
	// the runners, as there are at most maxInFlight of them.
	cancels map[*runner]context.CancelFunc
	// badWeights are the invalid weight values logged per target, of
	// those that sent any.
	badWeights map[*runner]map[string]bool
	// dirty are the targets whose health, Known or weight changed, or that
	// Set or Update added, redefined or removed, since the last Changes.
	dirty map[string]bool

	queue      queue     // the next round of every target running
	sleepUntil time.Time // of the scheduler's sleep; zero: until woken
	sleeping   bool      // the scheduler waits for sleepUntil or a wake
	finished   uint64    // rounds that ended: tests wait on it
	// delayed counts the rounds that waited for a slot, delayedLogged
	// their count at the last log line, delayLogged its time.
	delayed, delayedLogged uint64
	delayLogged            time.Time
	local                  uint64    // rounds not counted: Result.Local
	localLogged            time.Time // of the last log line of those
}

// Option configures a Monitor.
type Option func(*Monitor)

// WithClock replaces the real clock, for tests.
func WithClock(c Clock) Option { return func(m *Monitor) { m.clock = c } }

// WithDialer replaces the plain net.Dialer used by the tcp, http, https,
// udp and dns checks.
func WithDialer(d Dialer) Option { return func(m *Monitor) { m.dialer = d } }

// WithJitter replaces the source of start offsets: f returns the delay
// before a target's first round, in [0, interval).
func WithJitter(f func(interval time.Duration) time.Duration) Option {
	return func(m *Monitor) { m.jitter = f }
}

// DefaultReuse is how many rounds an http or https check uses one
// connection before dialling a new one.
const DefaultReuse = 10

// WithReuse sets how many rounds an http or https check keeps using one
// connection (HTTP keep-alive): 1 dials a new connection every round and
// sends "Connection: close". See the package documentation for the trade.
func WithReuse(rounds int) Option {
	return func(m *Monitor) { m.reuse = max(rounds, 1) }
}

// WithFactory replaces the built-in checkers, for tests.
func WithFactory(f Factory) Option {
	return func(m *Monitor) { m.factory, m.ownFactory = f, f != nil }
}

// NewMonitor returns a Monitor with no targets; it checks nothing until Run.
func NewMonitor(log *slog.Logger, opts ...Option) *Monitor {
	m := &Monitor{
		log:        log,
		clock:      realClock{},
		jitter:     randomJitter,
		icmp:       &pingers{},
		reuse:      DefaultReuse,
		changed:    make(chan struct{}, 1),
		wake:       make(chan struct{}, 1),
		runners:    make(map[string]*runner),
		groups:     make(map[string]*group),
		badWeights: make(map[*runner]map[string]bool),
		cancels:    make(map[*runner]context.CancelFunc),
		dirty:      make(map[string]bool),
	}
	// KeepAlive -1: a kept connection carries a request every round,
	// which finds a dead peer sooner than TCP keep-alive probes would;
	// they would only cost setsockopt calls.
	m.dialer = &net.Dialer{KeepAlive: -1}
	for _, o := range opts {
		o(m)
	}
	if m.log == nil {
		m.log = slog.New(slog.DiscardHandler)
	}
	m.epoch = m.clock.Now()
	if m.maxInFlight <= 0 {
		m.maxInFlight = defaultMaxInFlight()
	}
	m.slots = make(chan struct{}, m.maxInFlight)
	if m.factory == nil {
		m.factory = m.newChecker
	}
	return m
}

// randomJitter spreads first rounds uniformly over the interval.
func randomJitter(interval time.Duration) time.Duration {
	if interval <= 0 {
		return 0
	}
	return rand.N(interval)
}

// Run checks the targets until ctx ends, then stops every check, waits for
// them and returns nil. It may be called only once.
func (m *Monitor) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	m.mu.Lock()
	if m.started {
		m.mu.Unlock()
		return errors.New("health: Monitor.Run called twice")
	}
	m.started = true
	for _, r := range m.runners {
		m.first(r)
	}
	m.mu.Unlock()

	m.schedule(ctx)
	m.mu.Lock()
	m.stopped = true
	m.mu.Unlock()
	m.wg.Wait()
	// No round runs any more: the checkers' connections can go.
	m.mu.Lock()
	for _, r := range m.runners {
		r.close()
	}
	m.queue = nil
	m.mu.Unlock()
	m.icmp.close()
	return nil
}

// Set replaces the wanted set of targets. A target whose Key is new starts
// healthy but unknown; one whose definition changed is restarted with its
// State kept (so a reload does not flap it: hysteresis simply continues
// under the new checks); one that is unchanged keeps running untouched; one
// that is missing is stopped and forgotten. Duplicate keys are logged and
// all but the first ignored.
func (m *Monitor) Set(targets []Target) {
	m.mu.Lock()
	idle := m.replace(nil, targets)
	m.mu.Unlock()
	closeAll(idle)
}

// Update is Set for the targets of some groups only (Target.Group): the
// targets of those groups become targets, the others stay as they are. A
// reload of one service among thousands hands over that service's
// targets, not every target again. Targets of other groups are ignored.
func (m *Monitor) Update(groups map[string]bool, targets []Target) {
	m.mu.Lock()
	idle := m.replace(groups, targets)
	m.mu.Unlock()
	closeAll(idle)
}

func closeAll(rs []*runner) {
	for _, r := range rs {
		r.close()
	}
}

// replace is Set (groups nil) or Update; m.mu must be held. It returns the
// runners stopped between rounds, whose checkers the caller closes once
// m.mu is released (those stopped during a round close their own).
//
// A target is unchanged when its spec is its runner's and its address and
// port are the same: with the checks shared per group by the caller, a
// reload that hands over 100,000 unchanged targets compares checks once
// per group, and keeps every runner.
func (m *Monitor) replace(groups map[string]bool, targets []Target) (idle []*runner) {
	now := m.clock.Now()
	seen := make(map[string]bool, len(targets))
	members := map[string][]*runner{} // of the groups replaced, as they become
	specs := m.specFinder()
	var added, changed, removed int
	for i := range targets {
		t := &targets[i]
		if groups != nil && !groups[t.Group] {
			m.log.Warn("health target outside the groups updated ignored", "event", "health", "target", t.Key, "group", t.Group)
			continue
		}
		if seen[t.Key] {
			m.log.Warn("duplicate health target ignored", "event", "health", "target", t.Key)
			continue
		}
		seen[t.Key] = true
		old := m.runners[t.Key]
		var oldSpec *spec
		if old != nil {
			oldSpec = old.spec
			if g := old.spec.group; g != t.Group && groups != nil && !groups[g] {
				m.leave(g, old) // a group not replaced: it would keep it
			}
		}
		s := specs.of(t, oldSpec)
		if old != nil && old.spec == s && old.addr == t.Addr && old.port == t.Port {
			members[t.Group] = append(members[t.Group], old)
			continue
		}
		st := m.statusOf(State{Healthy: !t.StartDown, Weight: NoWeight, Since: now})
		if old != nil {
			if old.stop() {
				idle = append(idle, old)
			}
			st = old.st
			changed++
		} else {
			added++
		}
		r := m.newRunner(t, s, st)
		m.runners[t.Key] = r
		members[t.Group] = append(members[t.Group], r)
		m.dirty[t.Key] = true
		if m.started && !m.stopped {
			m.first(r)
		}
	}
	drop := func(r *runner) {
		if cur := m.runners[r.key]; cur == r && !seen[r.key] {
			if r.stop() {
				idle = append(idle, r)
			}
			delete(m.runners, r.key)
			m.dirty[r.key] = true
			removed++
		}
	}
	if groups == nil {
		for _, r := range m.runners {
			drop(r)
		}
		for g := range m.groups {
			if members[g] == nil {
				delete(m.groups, g)
			}
		}
	} else {
		for g := range groups {
			if grp := m.groups[g]; grp != nil {
				for _, r := range grp.members {
					drop(r)
				}
				if members[g] == nil {
					delete(m.groups, g)
				}
			}
		}
	}
	for g, rs := range members {
		grp := m.groups[g]
		if grp == nil {
			grp = &group{}
			m.groups[g] = grp
		}
		grp.members = slices.Clip(rs)
	}
	m.log.Debug("health targets set", "event", "health_set", "targets", len(m.runners),
		"added", added, "changed", changed, "removed", removed)
	return idle
}

// leave takes r out of group g, which is not being replaced; m.mu is held.
func (m *Monitor) leave(g string, r *runner) {
	grp := m.groups[g]
	if grp == nil {
		return
	}
	if grp.members = without(grp.members, r); len(grp.members) == 0 {
		delete(m.groups, g)
	}
}

// Changed delivers a value after some target's health, Known or weight
// changed. It is a hint: several changes may be coalesced into one, so
// read Snapshot after it fires. Set itself sends none: its caller knows
// what it added and removed.
func (m *Monitor) Changed() <-chan struct{} { return m.changed }

// Changes returns the State of every target marked since the last call
// (its health, Known or weight changed; Set or Update added or redefined
// it) and the keys of those removed since: what a consumer that keeps the
// states must apply to be up to date, in proportion to what changed, not
// to the number of targets. all is false: the states are only those.
func (m *Monitor) Changes() (states map[string]State, removed []string, all bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	states = make(map[string]State, len(m.dirty))
	var groups groupCache
	for key := range m.dirty {
		if r := m.runners[key]; r != nil {
			states[key] = m.stateOf(r.st, groups.of(m, r))
		} else {
			removed = append(removed, key)
		}
	}
	// A map keeps its buckets when cleared: after a Set of 100,000 targets
	// every later call would walk them all. A new one costs what changed.
	if len(m.dirty) > 1024 {
		m.dirty = make(map[string]bool)
	} else {
		clear(m.dirty)
	}
	return states, removed, false
}

// Snapshot returns a copy of every target's State, by Key.
func (m *Monitor) Snapshot() map[string]State {
	m.mu.Lock()
	defer m.mu.Unlock()
	states := make(map[string]State, len(m.runners))
	var groups groupCache
	for key, r := range m.runners {
		states[key] = m.stateOf(r.st, groups.of(m, r))
	}
	return states
}

// States calls f with the State of each of keys in turn, ok false for a
// key that is no target, all as of one instant. Unlike Snapshot it copies
// no other target's: at 100,000 targets a Snapshot is a map of 25 MB, and
// a reader of a few of them, or of one word per target, pays for those.
// f runs with the Monitor's lock held: it must be quick, and must not call
// the Monitor.
func (m *Monitor) States(keys []string, f func(i int, st State, ok bool)) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var groups groupCache
	for i, key := range keys {
		if r := m.runners[key]; r != nil {
			f(i, m.stateOf(r.st, groups.of(m, r)), true)
		} else {
			f(i, State{}, false)
		}
	}
}

// groupCache finds the groups of runners met in turn, looking each up
// once while they come in a row.
type groupCache struct {
	name string
	g    *group
}

func (c *groupCache) of(m *Monitor, r *runner) *group {
	if c.g == nil || c.name != r.spec.group {
		c.name, c.g = r.spec.group, m.groups[r.spec.group]
	}
	return c.g
}

// publish stores st as r's state and counts took in its group's
// durations, unless r has been replaced or removed meanwhile, and sends
// the Changed hint if notify is set.
func (m *Monitor) publish(r *runner, st status, took time.Duration, notify bool) {
	m.mu.Lock()
	current := m.runners[r.key] == r
	if current {
		r.st = st
		if g := m.groups[r.spec.group]; g != nil {
			g.durations.Observe(took)
		}
		if notify {
			m.dirty[r.key] = true
		}
	}
	m.mu.Unlock()
	if current && notify {
		select {
		case m.changed <- struct{}{}:
		default: // a hint is already pending
		}
	}
}

// maxSlot is the coarsest grid that rounds are started on. Rounds of all
// targets start only at epoch + k*slot, so the Go runtime wakes once per
// slot for all the targets due in it instead of once per target: on a VM,
// where each wake-up costs tens of microseconds, 1,000 checks a second
// cost 10 % of a core on a fine grid, 4 % with 50 ms slots and 3.4 % with
// 100 ms slots (e2e/healthbench). align keeps at least ten slots per
// interval, so the jitter still spreads the targets.
const maxSlot = 100 * time.Millisecond

// align moves t back onto the slot grid of a target whose rounds come
// every interval: slots of maxSlot, or interval/10 for short intervals so
// that they still spread over ten slots. Back, not forward: a round may
// come up to one slot early, never late, so no check runs less often than
// its interval asks.
func (m *Monitor) align(t time.Time, interval time.Duration) time.Time {
	slot := min(maxSlot, interval/10)
	if slot <= 0 || t.Before(m.epoch) {
		return t
	}
	return m.epoch.Add(t.Sub(m.epoch) / slot * slot)
}
