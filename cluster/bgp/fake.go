package bgp

import (
	"context"
	"errors"
	"maps"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/lvsd/lvsd/cluster/bfd"
)

// Fake is a stateful stand-in for Speaker in agent tests: it validates
// route sets as the Speaker does, keeps what is announced, records an op
// log and reports configurable peer states. Like the Speaker, one started
// Restarting (with graceful restart on) keeps its sessions closed until
// its first routes, and stops for a restart (CloseForRestart) leaving its
// routes announced.
type Fake struct {
	mu       sync.Mutex // guards all following fields
	cfg      Config
	started  time.Time
	routes   map[netip.Prefix]Route
	peers    map[netip.Addr]*PeerStatus
	ops      []string
	failNext error
	// pending: restarting, the sessions wait for the first routes;
	// openedAt is when they opened.
	pending  bool
	openedAt time.Time
	closed   bool
}

var _ Announcer = (*Fake)(nil)

// NewFake returns a Fake for cfg (validated as Start does, except that no
// BFD server is needed) whose peers are all established.
func NewFake(cfg Config) (*Fake, error) {
	if cfg.BFD == nil {
		cfg.BFD = noBFD{}
	}
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	now := time.Now()
	f := &Fake{cfg: cfg, started: now, routes: map[netip.Prefix]Route{}, peers: map[netip.Addr]*PeerStatus{},
		pending: cfg.Restarting && cfg.GracefulRestart.Enabled}
	for _, p := range cfg.Peers {
		ps := &PeerStatus{Address: p.Address, ASN: p.ASN, State: StateEstablished, Since: now, Established: now}
		switch {
		case f.pending: // openAfterRestart brings them up
			ps.State, ps.Established = StateIdle, time.Time{}
		case p.BFD:
			ps.BFD = "up"
		}
		f.peers[p.Address] = ps
	}
	return f, nil
}

// SetRoutes validates and records the new route set.
func (f *Fake) SetRoutes(_ context.Context, routes []Route) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.usable(); err != nil {
		return err
	}
	want, err := validateRoutes(f.cfg, routes)
	if err != nil {
		return err
	}
	f.apply(want)
	if f.pending && len(want) > 0 {
		f.openAfterRestart()
	}
	return nil
}

// openAfterRestart establishes the sessions a restarting Fake held back,
// as the Speaker opens them with its first routes.
func (f *Fake) openAfterRestart() {
	now := time.Now()
	f.pending, f.openedAt = false, now
	f.ops = append(f.ops, "open sessions as the restarting speaker")
	for _, p := range f.cfg.Peers {
		ps := f.peers[p.Address]
		ps.State, ps.Since, ps.Established = StateEstablished, now, now
		if p.BFD {
			ps.BFD = "up"
		}
	}
}

// usable is the error of a call that cannot be made now: FailNext's, or
// ErrClosed.
func (f *Fake) usable() error {
	if f.closed {
		return ErrClosed
	}
	return f.takeFailure()
}

func (f *Fake) apply(want map[netip.Prefix]Route) {
	for _, p := range slices.SortedFunc(maps.Keys(f.routes), netip.Prefix.Compare) {
		if _, keep := want[p]; !keep {
			delete(f.routes, p)
			f.ops = append(f.ops, "withdraw "+p.String())
		}
	}
	for _, p := range slices.SortedFunc(maps.Keys(want), netip.Prefix.Compare) {
		if old, ok := f.routes[p]; !ok || !old.Equal(want[p]) {
			f.routes[p] = want[p]
			f.ops = append(f.ops, "announce "+want[p].String())
		}
	}
}

// Withdraw withdraws everything.
func (f *Fake) Withdraw(context.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.usable(); err != nil {
		return err
	}
	f.apply(nil)
	return nil
}

// Close withdraws everything and stops, as the Speaker's Close: "close"
// in the op log; later calls but Status return ErrClosed.
func (f *Fake) Close(context.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return nil
	}
	f.apply(nil)
	f.stop("close", "notification-sent cease/peer-deconfigured")
	return nil
}

// CloseForRestart stops for a planned restart as the Speaker's does: with
// graceful restart the routes stay announced (the routers keep them) and
// the sessions end; "close for restart" in the op log. Without graceful
// restart it is Close.
func (f *Fake) CloseForRestart(ctx context.Context) error {
	if !f.cfg.GracefulRestart.Enabled {
		return f.Close(ctx)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.closed {
		f.stop("close for restart", "closed for a restart")
	}
	return nil
}

// stop takes every session down for reason and marks the Fake closed.
func (f *Fake) stop(op, reason string) {
	now := time.Now()
	for _, p := range f.peers {
		if p.State == StateEstablished {
			p.Flaps++
			p.LastFlap, p.LastFlapReason, p.Established = now, reason, time.Time{}
		}
		p.State, p.Since, p.BFD = StateIdle, now, ""
	}
	f.ops = append(f.ops, op)
	f.closed = true
}

// Status reports the peers and the announced routes; Announced counts
// every route of a family the peer carries while it is established.
func (f *Fake) Status(context.Context) (Status, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	st := Status{ASN: f.cfg.ASN, RouterID: f.cfg.RouterID, GracefulRestart: gracefulStatusOf(f.cfg, f.started, f.pending, f.openedAt)}
	for _, p := range f.cfg.Peers {
		ps := *f.peers[p.Address]
		ps.Announced = 0
		if ps.State == StateEstablished {
			for prefix := range f.routes {
				if p.carries(familyOf(prefix.Addr())) {
					ps.Announced++
				}
			}
		}
		st.Peers = append(st.Peers, ps)
	}
	slices.SortFunc(st.Peers, func(a, b PeerStatus) int { return a.Address.Compare(b.Address) })
	st.Routes = f.sortedRoutes()
	st.markStalePaths(time.Now())
	return st, nil
}

// Routes returns the announced routes sorted by prefix.
func (f *Fake) Routes() []Route {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.sortedRoutes()
}

func (f *Fake) sortedRoutes() []Route {
	out := make([]Route, 0, len(f.routes))
	for _, p := range slices.SortedFunc(maps.Keys(f.routes), netip.Prefix.Compare) {
		out = append(out, f.routes[p])
	}
	return out
}

// SetPeer changes a peer's session (and BFD) state as a test wants it.
func (f *Fake) SetPeer(addr netip.Addr, state SessionState, bfdState, reason string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	p := f.peers[addr]
	if p == nil {
		return
	}
	now := time.Now()
	if p.State == StateEstablished && state != StateEstablished {
		p.Flaps++
		p.LastFlap, p.LastFlapReason, p.Established = now, reason, time.Time{}
	}
	if state == StateEstablished && p.State != StateEstablished {
		p.Established = now
	}
	p.State, p.Since, p.BFD = state, now, bfdState
}

// Ops returns the log: "announce <route>", "withdraw <prefix>".
func (f *Fake) Ops() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.ops)
}

// FailNext makes the next SetRoutes or Withdraw return err, changing
// nothing.
func (f *Fake) FailNext(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.failNext = err
}

func (f *Fake) takeFailure() error {
	err := f.failNext
	f.failNext = nil
	return err
}

// noBFD satisfies Config.BFD for a Fake's peers with BFD set.
type noBFD struct{}

var errNoBFD = errors.New("bgp: fake has no BFD")

func (noBFD) AddPeer(context.Context, bfd.PeerConfig) error { return errNoBFD }
func (noBFD) RemovePeer(context.Context, netip.Addr) error  { return nil }
func (noBFD) Subscribe(func(bfd.Change)) func()             { return func() {} }
