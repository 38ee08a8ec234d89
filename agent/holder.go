package agent

import (
	"context"
	"errors"
	"log/slog"
	"net/netip"
	"slices"
	"sync/atomic"
	"time"
)

// VIPOwnership is the cluster's side of VIP ownership (cluster.Node,
// cluster.FakeNode). Implementations must be safe for concurrent use.
type VIPOwnership interface {
	// Serve tells the cluster which VIPs this director can serve now (their
	// data plane is programmed): it decides about these only.
	Serve(vips []netip.Addr)
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
	Desired Desired // its Interface, VIPs (programmed ones) and NAT (in force)
	// InUse are addresses to keep whoever holds their VIP (AddressesInUse).
	InUse map[netip.Addr]bool
}

// Holder puts the addresses of the VIPs this director holds on its
// interface and takes the others away: the takeovers and releases of
// PlanAddresses, applied through the same Kernel.Apply as the data plane.
// It runs on its own goroutine so that an ownership change never waits
// behind a reconcile pass, which can be long with many services; it reads
// back only the interface's addresses.
//
// Once started (Start), its goroutine owns its state and Sync goes through
// it. Before Start (tests) Sync runs on the caller's goroutine; Release and
// ReleaseStale only ever do, once the loop has stopped or before it starts.
type Holder struct {
	k        Kernel
	vips     VIPOwnership // nil: every programmed VIP is held
	stateDir string
	log      *slog.Logger

	reqs    chan syncReq
	running atomic.Bool

	// Owned by the goroutine running Run (or calling Sync/Release).
	owned  Ownership
	prog   Programmed
	synced bool         // prog came from a reconcile pass
	served []netip.Addr // last told to the cluster
}

type syncReq struct {
	ctx   context.Context
	p     Programmed
	reply chan syncReply
}

type syncReply struct {
	ops []Op
	err error
}

// NewHolder returns a holder adding addresses through k, deciding with vips
// (nil: hold everything) and recording what it added under stateDir.
func NewHolder(k Kernel, vips VIPOwnership, stateDir string, log *slog.Logger) (*Holder, error) {
	owned, err := LoadOwnedAddresses(stateDir)
	if err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Holder{k: k, vips: vips, stateDir: stateDir, log: log, reqs: make(chan syncReq), owned: owned}, nil
}

// Start runs the holder's goroutine until ctx ends: ownership changes take
// effect at once, and the reconciler's Syncs are applied there. The
// returned function waits until it has stopped.
func (h *Holder) Start(ctx context.Context) (wait func()) {
	h.running.Store(true) // before the goroutine: every later Sync goes through it
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
		case r := <-h.reqs:
			ops, err := h.sync(r.ctx, r.p)
			r.reply <- syncReply{ops, err}
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

// Sync hands the holder the data plane a reconcile pass programmed and
// returns the address ops that followed.
func (h *Holder) Sync(ctx context.Context, p Programmed) ([]Op, error) {
	if !h.running.Load() {
		return h.sync(ctx, p)
	}
	reply := make(chan syncReply, 1)
	select {
	case h.reqs <- syncReq{ctx, p, reply}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	r := <-reply // the loop answers every request it took
	return r.ops, r.err
}

func (h *Holder) sync(ctx context.Context, p Programmed) ([]Op, error) {
	h.prog, h.synced = p, true
	if h.vips != nil {
		vips := make([]netip.Addr, len(p.Desired.VIPs))
		for i, v := range p.Desired.VIPs {
			vips[i] = v.VIP
		}
		if !slices.Equal(vips, h.served) {
			h.vips.Serve(vips)
			h.served = vips
		}
	}
	return h.pass(ctx)
}

// ReleaseStale removes every address a previous run left (a cluster
// director holds nothing until the cluster gives it VIPs). Call it before
// the cluster node starts, before Start.
func (h *Holder) ReleaseStale(ctx context.Context) error {
	_, err := h.apply(ctx, PlanAddresses(AddressInput{Owned: h.owned}))
	return err
}

// Release removes every address the holder owns, whatever it holds: the
// director is leaving the cluster. Call it once the loop has stopped.
func (h *Holder) Release(ctx context.Context) error {
	d := h.prog.Desired
	present, err := h.k.Addrs.List(ctx, d.Interface)
	if err != nil {
		present = Addresses(d.VIPs) // try them all; a missing one is no error
	}
	_, err = h.apply(ctx, PlanAddresses(AddressInput{Interface: d.Interface, VIPs: d.VIPs, Owned: h.owned,
		Present: present, Release: h.k.Relay != nil}))
	return err
}

// pass plans and applies the addresses of the VIPs held now.
func (h *Holder) pass(ctx context.Context) ([]Op, error) {
	d := h.prog.Desired
	present, err := h.k.Addrs.List(ctx, d.Interface)
	if err != nil {
		return nil, err
	}
	held := make(map[netip.Addr]bool, len(d.VIPs))
	for _, v := range d.VIPs {
		held[v.VIP] = h.vips == nil || h.vips.Holds(v.VIP)
	}
	return h.apply(ctx, PlanAddresses(AddressInput{
		Interface: d.Interface, VIPs: d.VIPs, Held: held, Present: present, Owned: h.owned, InUse: h.prog.InUse,
		Ruleset: d.NAT, Restore: h.k.Conntrack != nil, Announce: h.k.Announcer != nil, Release: h.k.Relay != nil,
	}))
}

// apply runs ops with the record written ahead, tells the cluster which
// addresses came and went, and logs each op.
func (h *Holder) apply(ctx context.Context, ops []Op) ([]Op, error) {
	if len(ops) == 0 {
		return nil, nil
	}
	start := time.Now()
	intended := h.owned.Intend(ops)
	if err := h.save(intended); err != nil {
		return nil, err // nothing changed: better no address than one lvsd does not know it made
	}
	errs := h.k.Apply(ctx, ops)
	for i, op := range ops {
		if errs[i] == nil && h.vips != nil && (op.Kind == AddAddress || op.Kind == DeleteAddress) {
			h.vips.AddressChanged(op.Address.Addr(), op.Kind == AddAddress)
		}
	}
	if err := h.save(intended.After(ops, errs)); err != nil {
		h.log.Error("saving the address record", "err", err)
	}
	logOps(h.log, ops, errs)
	h.log.Debug("addresses", "ops", len(ops), "duration", time.Since(start).String())
	return ops, errors.Join(errs...)
}

func (h *Holder) save(o Ownership) error {
	if o.Equal(h.owned) {
		return nil
	}
	if err := SaveOwnedAddresses(h.stateDir, o); err != nil {
		return err
	}
	h.owned = o
	return nil
}
