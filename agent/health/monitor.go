package health

import (
	"context"
	"errors"
	"log/slog"
	"maps"
	"math/rand/v2"
	"net"
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
	icmp    *pingers
	reuse   int       // rounds an HTTP connection serves
	epoch   time.Time // origin of the slot grid

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
	states  map[string]State // published by the runners
	// groups are the keys of the targets of each Target.Group, for Update.
	groups map[string]map[string]bool
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
func WithFactory(f Factory) Option { return func(m *Monitor) { m.factory = f } }

// NewMonitor returns a Monitor with no targets; it checks nothing until Run.
func NewMonitor(log *slog.Logger, opts ...Option) *Monitor {
	m := &Monitor{
		log:     log,
		clock:   realClock{},
		jitter:  randomJitter,
		icmp:    &pingers{},
		reuse:   DefaultReuse,
		changed: make(chan struct{}, 1),
		wake:    make(chan struct{}, 1),
		runners: make(map[string]*runner),
		states:  make(map[string]State),
		groups:  make(map[string]map[string]bool),
		dirty:   make(map[string]bool),
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
func (m *Monitor) replace(groups map[string]bool, targets []Target) (idle []*runner) {
	now := m.clock.Now()
	seen := make(map[string]bool, len(targets))
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
		if old != nil && old.t.Group != t.Group {
			m.ungroup(old.t.Group, t.Key)
		}
		m.group(t.Group, t.Key)
		if old != nil && equalTarget(&old.t, t) {
			continue
		}
		st := State{Healthy: !t.StartDown, Weight: NoWeight, Since: now}
		if old != nil {
			if old.stop() {
				idle = append(idle, old)
			}
			st = m.states[t.Key]
			changed++
		} else {
			added++
		}
		r := m.newRunner(t.clone(), st)
		m.runners[t.Key] = r
		m.states[t.Key] = st
		m.dirty[t.Key] = true
		if m.started && !m.stopped {
			m.first(r)
		}
	}
	drop := func(key string) {
		if r := m.runners[key]; r != nil && !seen[key] {
			if r.stop() {
				idle = append(idle, r)
			}
			delete(m.runners, key)
			delete(m.states, key)
			m.dirty[key] = true
			m.ungroup(r.t.Group, key)
			removed++
		}
	}
	if groups == nil {
		for key := range m.runners {
			drop(key)
		}
	} else {
		for g := range groups {
			for key := range m.groups[g] {
				drop(key)
			}
		}
	}
	m.log.Debug("health targets set", "event", "health_set", "targets", len(m.runners),
		"added", added, "changed", changed, "removed", removed)
	return idle
}

func (m *Monitor) group(g, key string) {
	if m.groups[g] == nil {
		m.groups[g] = map[string]bool{}
	}
	m.groups[g][key] = true
}

func (m *Monitor) ungroup(g, key string) {
	delete(m.groups[g], key)
	if len(m.groups[g]) == 0 {
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
	for key := range m.dirty {
		if st, ok := m.states[key]; ok {
			states[key] = st
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
	return maps.Clone(m.states)
}

// publish stores st as r's State, unless r has been replaced or removed
// meanwhile, and sends the Changed hint if notify is set.
func (m *Monitor) publish(r *runner, st State, notify bool) {
	m.mu.Lock()
	current := m.runners[r.t.Key] == r
	if current {
		m.states[r.t.Key] = st
		if notify {
			m.dirty[r.t.Key] = true
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
