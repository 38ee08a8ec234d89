package agent

import (
	"context"
	"errors"
	"log/slog"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/lvsd/lvsd/agent/apply"
	"github.com/lvsd/lvsd/agent/planner"

	"github.com/lvsd/lvsd/agent/statefile"
	"github.com/lvsd/lvsd/cluster/bgp"
)

// VIPOwnership is the cluster's side of VIP ownership (cluster.Node,
// cluster.FakeNode). Implementations must be safe for concurrent use.
type VIPOwnership interface {
	// Serve tells the cluster which VIPs this director can serve now (their
	// data plane is programmed): it decides about these only.
	Serve(vips []netip.Addr)
	// ServeHomes tells the cluster which of the served VIPs are a
	// director's own source addresses (VIPAddresses.Home), to be held by
	// that director while it lives and by a survivor otherwise. Only
	// FULLNAT under ECMP has homes: in every other mode the holder never
	// calls it with any, and an implementation may ignore an empty map.
	ServeHomes(homes map[netip.Addr]string)
	// Holds reports whether this director holds vip now.
	Holds(vip netip.Addr) bool
	// AddressChanged reports that an address of a VIP was added here
	// (present) or removed: a director claims a VIP until its address is
	// really gone, so a peer takes it only then.
	AddressChanged(addr netip.Addr, present bool)
	// Changed delivers a value whenever Holds may answer differently.
	Changed() <-chan struct{}
}

// Programmed is what the reconciler tells the VIP holder after each pass:
// the data plane as programmed, which says which VIPs may be held.
type Programmed struct {
	Desired planner.Desired // its Interface, VIPs (programmed ones) and NAT (in force)
	// InUse are addresses to keep whoever holds their VIP (AddressesInUse).
	InUse map[netip.Addr]bool
	// Eligible are the VIPs with an eligible backend (EligibleVIPs): with
	// BGP, the others are withdrawn.
	Eligible map[netip.Addr]bool
}

// Holder puts the addresses of the VIPs this director holds on its
// interface (or lo) and announces them — on the link, or to the routers over
// BGP — and takes the others away: the takeovers and releases of
// PlanAddresses, applied through the same Kernel.Apply as the data plane.
// It runs on its own goroutine so that an ownership change never waits
// behind a reconcile pass, which can be long with many services; it reads
// back only the addresses of its devices.
//
// Once started (Start), its goroutine owns its state and Sync and Drain go
// through it. Before Start (tests) they run on the caller's goroutine;
// Release, ReleaseStale and Stop only ever do, once the loop has stopped or
// before it starts.
type Holder struct {
	k        Kernel
	vips     VIPOwnership // nil: every programmed VIP is held
	stateDir string
	log      *slog.Logger

	reqs    chan request
	running atomic.Bool
	// shown is state as last changed, for State: the status never waits
	// behind a takeover or a pass of the holder's goroutine.
	shown atomic.Pointer[HolderState]

	// Owned by the goroutine running the loop (or the caller, see above).
	owned     planner.Ownership
	prog      Programmed
	synced    bool                  // prog came from a reconcile pass
	served    []netip.Addr          // last told to the cluster
	homes     map[netip.Addr]string // source-address groups last told to the cluster (ServeHomes)
	announced map[netip.Prefix]bgp.Route
	state     HolderState
	stopping  bool
	events    Events              // takes the VIPs taken and released
	reported  map[netip.Addr]bool // the VIPs held as last reported to events
	link      <-chan bool         // the interface's state (TrackLink); nil: not tracked
	linkDown  bool                // the interface cannot carry traffic: serve and hold nothing
	upstream  <-chan bool         // the upstream check's verdict (TrackUpstream); nil: none
	upDown    bool                // the upstream check fails: serve and hold nothing
	ifaces    *interfaces         // the other interfaces the VIPs name (TrackInterfaces); nil: not tracked
}

// HolderState is what the holder keeps across restarts (holder.json).
type HolderState struct {
	// Drained: `lvsd drain` on the director: its routes are withdrawn (or
	// depreferred), its established connections go on.
	Drained   bool      `json:"drained"`
	DrainedAt time.Time `json:"drained_at,omitzero"`
	// Grounded says why the director serves no VIP now ("interface
	// down", "upstream check failing"); "" when nothing holds it back.
	// Not kept across restarts.
	Grounded string `json:"-"`
	// InterfacesDown lists the interfaces VIPs name besides the director's
	// own that cannot carry traffic now ("eth1, eth0.20"): their VIPs are
	// not served. "" when none. Not kept across restarts.
	InterfacesDown string `json:"-"`
}

const holderFile = "holder.json"

// request runs f on the holder's goroutine.
type request struct {
	ctx   context.Context
	f     func(context.Context) ([]planner.Op, error)
	reply chan reply
}

type reply struct {
	ops []planner.Op
	err error
}

// NewHolder returns a holder adding addresses through k, deciding with vips
// (nil: hold everything) and recording what it added under stateDir.
func NewHolder(k Kernel, vips VIPOwnership, stateDir string, log *slog.Logger) (*Holder, error) {
	owned, err := LoadOwnedAddresses(stateDir)
	if err != nil {
		return nil, err
	}
	var st HolderState
	if err := statefile.Load(stateDir, holderFile, &st); err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	h := &Holder{k: k, vips: vips, stateDir: stateDir, log: log, reqs: make(chan request), owned: owned,
		announced: map[netip.Prefix]bgp.Route{}, state: st, events: noEvents{}}
	h.shown.Store(&st)
	return h, nil
}

// SetEvents makes the holder report the VIPs it takes and releases to e
// (the operator's ownership hook). Call it before Start.
func (h *Holder) SetEvents(e Events) {
	h.events = e
}

// Start runs the holder's goroutine until ctx ends: ownership changes take
// effect at once, and the reconciler's Syncs and drains are applied there.
// The returned function waits until it has stopped.
func (h *Holder) Start(ctx context.Context) (wait func()) {
	h.running.Store(true) // before the goroutine: every later request goes through it
	done := make(chan struct{})
	go func() {
		defer close(done)
		h.run(ctx)
	}()
	return func() { <-done }
}

func (h *Holder) run(ctx context.Context) {
	var changed <-chan struct{}
	if h.vips != nil {
		changed = h.vips.Changed()
	}
	for {
		select {
		case <-ctx.Done():
			return
		case up, ok := <-h.link:
			if !ok {
				h.link = nil // the watch ended with ctx
				continue
			}
			if _, err := h.linkChanged(ctx, up); err != nil {
				h.log.Error("some address changes failed; will retry", "err", err)
			}
		case ok, open := <-h.upstream:
			if !open {
				h.upstream = nil
				continue
			}
			if _, err := h.upstreamChanged(ctx, ok); err != nil {
				h.log.Error("some address changes failed; will retry", "err", err)
			}
		case c := <-h.interfaceChanges():
			if _, err := h.interfaceChanged(ctx, c); err != nil {
				h.log.Error("some address changes failed; will retry", "err", err)
			}
		case r := <-h.reqs:
			ops, err := r.f(r.ctx)
			r.reply <- reply{ops, err}
		case <-changed:
			if !h.synced {
				continue // nothing programmed yet: nothing to hold
			}
			h.log.Info("VIP ownership changed")
			if _, err := h.pass(ctx); err != nil {
				h.log.Error("some address changes failed; will retry", "err", err)
			}
		}
	}
}

// do runs f on the holder's goroutine once started, else on the caller's.
func (h *Holder) do(ctx context.Context, f func(context.Context) ([]planner.Op, error)) ([]planner.Op, error) {
	if !h.running.Load() {
		return f(ctx)
	}
	r := make(chan reply, 1)
	select {
	case h.reqs <- request{ctx, f, r}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	got := <-r // the loop answers every request it took
	return got.ops, got.err
}

// Sync hands the holder the data plane a reconcile pass programmed and
// returns the address ops that followed.
func (h *Holder) Sync(ctx context.Context, p Programmed) ([]planner.Op, error) {
	return h.do(ctx, func(ctx context.Context) ([]planner.Op, error) { return h.sync(ctx, p) })
}

func (h *Holder) sync(ctx context.Context, p Programmed) ([]planner.Op, error) {
	h.prog, h.synced = p, true
	h.watchInterfaces()
	h.serve()
	return h.pass(ctx)
}

// serve tells the cluster which VIPs this director can serve: those
// programmed, none while its interface is down.
func (h *Holder) serve() {
	if h.vips == nil {
		return
	}
	vips := []netip.Addr{}
	for _, v := range h.prog.Desired.VIPs {
		if h.servable(v) {
			vips = append(vips, v.VIP)
		}
	}
	homes := map[netip.Addr]string{}
	for _, v := range h.prog.Desired.VIPs {
		if v.Home != "" {
			homes[v.VIP] = v.Home
		}
	}
	if !maps.Equal(homes, h.homes) {
		h.vips.ServeHomes(homes)
		h.homes = homes
	}
	if h.served == nil || !slices.Equal(vips, h.served) {
		h.vips.Serve(vips)
		h.served = vips
	}
}

// TrackLink makes the holder follow the state of the director's interface
// (arp.LinkWatcher): while it cannot carry traffic the director serves no
// VIP, so the cluster moves them to directors that can (and with BGP its
// routes are withdrawn); when it is back they return as the ranking says.
// Call it before Start.
func (h *Holder) TrackLink(states <-chan bool) {
	h.link = states
}

// TrackUpstream makes the holder follow the director's upstream check
// (the agent file's track block): while it fails the director serves no
// VIP, as while its interface is down. Call it before Start.
func (h *Holder) TrackUpstream(verdicts <-chan bool) {
	h.upstream = verdicts
}

// grounded reports whether the director cannot forward: its interface is
// down or its upstream check fails.
func (h *Holder) grounded() bool { return h.linkDown || h.upDown }

// linkChanged takes in the interface's state.
func (h *Holder) linkChanged(ctx context.Context, up bool) ([]planner.Op, error) {
	return h.trackChanged(ctx, &h.linkDown, up, "interface down: giving the VIPs up",
		"interface up: serving the VIPs again", "interface", h.prog.Desired.Interface)
}

// upstreamChanged takes in the upstream check's verdict.
func (h *Holder) upstreamChanged(ctx context.Context, ok bool) ([]planner.Op, error) {
	return h.trackChanged(ctx, &h.upDown, ok, "upstream check fails: giving the VIPs up",
		"upstream check passes: serving the VIPs again")
}

// trackChanged takes in one tracker's verdict (down is its flag), logs a
// change with lost or back, and serves and holds what the director can now.
func (h *Holder) trackChanged(ctx context.Context, down *bool, ok bool, lost, back string, attrs ...any) ([]planner.Op, error) {
	if *down == !ok {
		return nil, nil
	}
	*down = !ok
	if ok {
		h.log.Info(back, attrs...)
	} else {
		h.log.Warn(lost, attrs...)
	}
	h.publish()
	if !h.synced {
		return nil, nil
	}
	h.serve()
	return h.pass(ctx)
}

// Drain drains the director (on) or puts it back in service: with BGP its
// routes are withdrawn (or depreferred) while its established connections
// go on. The state is kept across restarts. It returns the state in force.
func (h *Holder) Drain(ctx context.Context, on bool, now time.Time) (HolderState, error) {
	var st HolderState
	_, err := h.do(ctx, func(ctx context.Context) ([]planner.Op, error) {
		if h.state.Drained != on {
			next := HolderState{Drained: on}
			if on {
				next.DrainedAt = now
			}
			if err := statefile.Save(h.stateDir, holderFile, next); err != nil {
				return nil, err
			}
			h.state = next
			h.publish()
			h.log.Info("director drain", "drained", on)
		}
		st = h.state
		if !h.synced {
			return nil, nil
		}
		return h.pass(ctx)
	})
	return st, err
}

// State returns what the holder keeps across restarts and why it is
// grounded, as last changed. Safe to call from any goroutine; it does not
// wait for the holder's.
func (h *Holder) State() HolderState { return *h.shown.Load() }

// publish makes State show the holder's state now.
func (h *Holder) publish() {
	st := h.state
	var why []string
	if h.linkDown {
		why = append(why, "interface down")
	}
	if h.upDown {
		why = append(why, "upstream check failing")
	}
	st.Grounded = strings.Join(why, ", ")
	st.InterfacesDown = h.interfacesDown()
	h.shown.Store(&st)
}

// ReleaseStale removes every address a previous run left (a cluster
// director holds nothing until the cluster gives it VIPs). Call it before
// the cluster node starts, before Start.
func (h *Holder) ReleaseStale(ctx context.Context) error {
	_, err := h.apply(ctx, planner.PlanAddresses(planner.AddressInput{Owned: h.owned}))
	return err
}

// Stop withdraws every route (the director stops: the routers send the
// flows elsewhere while the VIPs still answer). Call it once the loop has
// stopped.
func (h *Holder) Stop(ctx context.Context) error {
	h.stopping = true
	if !h.synced {
		return nil
	}
	_, err := h.pass(ctx)
	return err
}

// Release removes every address the holder owns, whatever it holds: the
// director is leaving the cluster. Call it once the loop has stopped.
func (h *Holder) Release(ctx context.Context) error {
	h.stopping = true
	in := h.input(h.present(ctx), nil)
	in.InUse = nil
	_, err := h.apply(ctx, planner.PlanAddresses(in))
	return err
}

// pass plans and applies the addresses of the VIPs held now.
func (h *Holder) pass(ctx context.Context) ([]planner.Op, error) {
	held := make(map[netip.Addr]bool, len(h.prog.Desired.VIPs))
	for _, v := range h.prog.Desired.VIPs {
		held[v.VIP] = h.servable(v) && (h.vips == nil || h.vips.Holds(v.VIP))
	}
	present, err := listPresent(ctx, h.k, h.prog.Desired)
	if err != nil {
		return nil, err
	}
	ops, err := h.apply(ctx, planner.PlanAddresses(h.input(present, held)))
	// After the addresses: the hook hears of a takeover once it is done
	// (or tried; a failed address is retried by the next pass).
	for _, ev := range ownershipEvents(h.reported, held) {
		h.events.Notify(ev)
	}
	h.reported = held
	return ops, err
}

// present lists the addresses of the holder's devices, or, when that
// fails, takes every address it owns as present (a missing one is no error
// to delete).
func (h *Holder) present(ctx context.Context) map[string][]netip.Prefix {
	if p, err := listPresent(ctx, h.k, h.prog.Desired); err == nil {
		return p
	}
	out := map[string][]netip.Prefix{}
	for _, o := range h.owned.Addresses {
		out[o.Interface] = append(out[o.Interface], o.Prefix)
	}
	return out
}

// input is the holder's AddressInput: its state, held as given.
func (h *Holder) input(present map[string][]netip.Prefix, held map[netip.Addr]bool) planner.AddressInput {
	in := addressInput(h.k, h.prog, present, h.owned, held)
	in.Announced, in.Drained, in.Stopping = h.announced, h.state.Drained, h.stopping
	return in
}

// addressInput is the AddressInput of a director with host k and the data
// plane p (the holder's, or `lvsd plan`'s).
func addressInput(k Kernel, p Programmed, present map[string][]netip.Prefix, owned planner.Ownership, held map[netip.Addr]bool) planner.AddressInput {
	d := p.Desired
	return planner.AddressInput{Interface: d.Interface, VIPDevice: d.VIPDevice, VIPs: d.VIPs, Held: held, Present: present,
		Owned: owned, InUse: p.InUse, Ruleset: d.NAT, Routes: d.Announce, Eligible: p.Eligible,
		// Under ECMP, PeerFlows keeps the other directors' FULLNAT entries
		// all along, with their source addresses: a restore from the
		// connection table would give them this director's.
		Restore: k.Conntrack != nil && d.PeerSNAT == nil, Announce: k.Announcer != nil, Release: k.Relay != nil}
}

// apply runs ops with the record written ahead, tells the cluster which
// addresses came and went, keeps what is announced, and logs each op.
func (h *Holder) apply(ctx context.Context, ops []planner.Op) ([]planner.Op, error) {
	if len(ops) == 0 {
		return nil, nil
	}
	start := time.Now()
	applier := apply.Applier{Claims: planner.ClaimAddresses, Save: h.save, Run: h.k.Run}
	r, err := applier.Apply(ctx, h.owned, ops, nil)
	if err != nil {
		return nil, err // nothing changed: better no address than one lvsd does not know it made
	}
	errs := r.Errs
	h.announced = maps.Clone(h.announced)
	for i, op := range ops {
		if errs[i] != nil {
			continue
		}
		switch op.Kind {
		case planner.AddAddress, planner.DeleteAddress:
			if h.vips != nil {
				h.vips.AddressChanged(op.Address.Addr(), op.Kind == planner.AddAddress)
			}
		case planner.AnnounceRoute:
			h.announced[op.Route.Prefix] = op.Route
		case planner.WithdrawRoute:
			delete(h.announced, op.Route.Prefix)
		}
	}
	if r.SaveErr != nil {
		h.log.Error("saving the address record", "err", r.SaveErr)
	}
	logOps(h.log, ops, errs)
	h.log.Debug("addresses", "ops", len(ops), "duration", time.Since(start).String())
	return ops, errors.Join(errs...)
}

func (h *Holder) save(o planner.Ownership) error {
	if o.Equal(h.owned) {
		return nil
	}
	if err := SaveOwnedAddresses(h.stateDir, o); err != nil {
		return err
	}
	h.owned = o
	return nil
}
