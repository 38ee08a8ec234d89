package agent

import (
	"context"
	"errors"
	"maps"
	"reflect"
	"slices"
	"time"

	"github.com/lvsd/lvsd/agent/planner"

	"github.com/lvsd/lvsd/ipvs"
)

// pass brings the part of the data plane sc names to the desired state and
// returns the ops it and the VIP holder applied, with their count by kind:
// read back what sc names, plan it against the desired state with health
// applied, apply, hand the VIP holder what changed for it. A pass over
// more than passPart services plans and applies them a part at a time
// (passParts), and returns only the ops that failed or that the holder or
// the status need after it (keptAfterPart): the count has them all.
func (a *Agent) pass(ctx context.Context, sc scope) ([]planner.Op, planner.OpCounts) {
	start := a.opts.Now()
	desired := a.desired
	readStart := a.opts.Now()
	actual, keys, err := a.readBack(ctx, desired, sc)
	if err != nil {
		a.log.Error("reading kernel state", "err", err)
		sc.table = true // something is not as the agent thinks: look at all of it next time
		a.pending.merge(sc)
		a.publish(desired, a.actual, start, err)
		return nil, planner.OpCounts{}
	}
	a.audit.measured(len(keys), a.opts.Now().Sub(readStart))
	names, resetServices := a.unappliedServices()
	resets, applied := planner.ConnectionResets(a.applied.Get, a.eligibility.Get, resetServices)
	parts := passParts(keys, sc.all)
	if len(parts) > 1 {
		a.claimAhead(desired, keys)
	}
	var ops []planner.Op
	var errs []error
	var counts planner.OpCounts
	var applyErr error
	for i, part := range parts {
		in := planner.PlanInput{Desired: desired, Actual: actual, Owned: a.owned, Drains: a.drains,
			Now: a.opts.Now(), DrainTimeout: a.opts.DrainTimeout, Scope: part, SkipGlobals: i > 0 || (!sc.all && !sc.globals)}
		if i == 0 {
			in.Resets = resets
		}
		if part == nil {
			in.Room = holderRoom(desired)
		}
		partOps, drains := planner.Plan(in)
		a.drains = drains
		if i == 0 {
			a.markApplied(names, applied)
			a.logResets(desired, partOps)
		}
		partErrs, err := a.apply(ctx, desired, partOps, in.Scope)
		applyErr = errors.Join(applyErr, err)
		a.forgetResetConnections(partOps)
		actual.Applied(partOps, partErrs) // readBack's copy: ours until published
		a.retry(partOps, partErrs)
		counts.Add(partOps)
		if len(parts) == 1 {
			ops, errs = partOps, partErrs
			break
		}
		for j, op := range partOps {
			if keptAfterPart(op, partErrs[j]) {
				ops, errs = append(ops, op), append(errs, partErrs[j])
			}
		}
	}
	if len(parts) > 1 && sc.all {
		// The parts kept the drain records of services in none of them, as
		// a scoped pass does; a pass over every service keeps only those
		// it planned.
		maps.DeleteFunc(a.drains, func(k planner.DrainKey, _ time.Time) bool {
			_, found := slices.BinarySearchFunc(keys, k.Service, ipvs.ServiceKey.Compare)
			return !found
		})
	}
	a.actual = actual
	for _, k := range keys {
		if cur, ok := a.actual.Services.Get(k); ok && cur.ReadAt.IsZero() {
			cur.ReadAt = start // made by this pass: its numbers are as new
			a.actual.Services.Set(k, cur)
		}
	}
	if sc.all || sc.table || a.unwanted == nil {
		a.unwanted = planner.UnwantedIn(desired, a.actual) // the table was read: anyone's services may have come or gone
	} else {
		for _, k := range keys {
			a.unwanted.Look(desired, a.actual, k)
		}
	}

	held, holdErr := a.syncHolder(ctx, desired, actual, ops, errs, sc.holder || sc.all)
	ops = append(ops, held...)
	counts.Add(held)
	if err := errors.Join(applyErr, holdErr); err != nil {
		applyErr = err
		a.log.Error("some changes failed; will retry", "err", err)
	}
	a.publish(desired, a.actual, start, applyErr, ops...)
	// Passes that change nothing stay quiet, except the first: after a
	// restart it says the kernel was adopted as it was.
	if total, _ := counts.Total(); total > 0 || !a.reconciled {
		a.reconciled = true
		a.log.Info("reconciled", "ops", total, "changes", counts.String(), "services_read", len(keys),
			"duration", a.opts.Now().Sub(start).String())
	}
	return ops, counts
}

// passPart is how many IPVS services a pass plans and applies at a time.
// A cold start of 10,000 services × 10 backends planned 110,000 ops of
// 176 bytes at once (19 MB), held beside the configuration and the
// desired state until the kernel had taken them all and the view of the
// kernel was built from them: the pass's heap peaked 26 MiB above the
// settled heap (docs/performance.md). A part of 1,000 services plans about
// 11,000 ops (2 MB), enough for the parallel IPVS writers
// (Kernel.applySpread). The ownership record is written ahead of the
// parts, once (claimAhead).
const passPart = 1000

// claimAhead writes the ownership record once ahead of a pass in parts,
// claiming every service of keys the configuration wants: each part would
// otherwise write, and fsync, the whole growing record ahead of its own
// new services (ten times at a cold start of 10,000). A part's plan adds
// only services the configuration wants, so its own write-ahead then
// finds nothing new to claim; deletions still leave the record after the
// part that made them. Claiming a service a part then fails to add is what
// a single plan does too (apply.Applier keeps failed adds claimed). If the
// record cannot be saved here, each part tries again and, failing, applies
// nothing, as before.
func (a *Agent) claimAhead(d planner.Desired, keys []ipvs.ServiceKey) {
	wanted := make([]ipvs.ServiceKey, 0, len(keys))
	for _, k := range keys {
		if d.Wants(k) {
			wanted = append(wanted, k)
		}
	}
	claimed := a.owned.Adopt(wanted)
	if claimed.Equal(a.owned) {
		return
	}
	if err := a.saveOwned(claimed); err != nil {
		a.log.Error("saving ownership record", "err", err)
	}
}

// passParts splits the IPVS services a pass plans (keys, sorted) into the
// scopes of its parts: one part of all of them while they are few (nil,
// every service, for a pass over everything), else runs of passPart. The
// first part also plans the globals and the connection resets.
func passParts(keys []ipvs.ServiceKey, all bool) [][]ipvs.ServiceKey {
	if len(keys) <= passPart {
		if all {
			return [][]ipvs.ServiceKey{nil}
		}
		return [][]ipvs.ServiceKey{keys}
	}
	return slices.Collect(slices.Chunk(keys, passPart))
}

// keptAfterPart says whether op, applied with err in one part of a pass,
// is kept for what runs after the last part: the failures (Served, the
// log), the deleted services (the addresses still in use) and anything
// besides IPVS services and destinations (the status, the holder).
func keptAfterPart(op planner.Op, err error) bool {
	if err != nil {
		return true
	}
	switch op.Kind {
	case planner.AddService, planner.UpdateService, planner.AddDestination, planner.UpdateDestination,
		planner.DeleteDestination, planner.MoveDestination:
		return false
	}
	return true
}

// holderRoom is about how many ops the VIP holder plans after a pass over
// every service of d: at most an address and a route for each address.
func holderRoom(d planner.Desired) int {
	n := 8
	for _, v := range d.VIPs {
		n += 2 * len(v.Addresses)
	}
	return n
}

// readBack reads what sc names into a copy of the agent's view of the
// kernel and returns it with the IPVS services to plan, sorted: those of
// sc, the ones the service table showed missing, changed or new, and with
// sc.all every service lvsd wants or owns. Only services lvsd wants or owns
// get their destinations read: another user's thousands cost nothing.
func (a *Agent) readBack(ctx context.Context, d planner.Desired, sc scope) (planner.Actual, []ipvs.ServiceKey, error) {
	k, now := a.opts.Kernel, a.opts.Now()
	view := a.actual
	view.Services = a.actual.Services.Clone() // shares what this pass does not change
	keys := maps.Clone(sc.keys)
	if keys == nil {
		keys = map[ipvs.ServiceKey]bool{}
	}
	ours := func(key ipvs.ServiceKey) bool {
		return d.Wants(key) || a.owned.Owns(key)
	}
	listed := sc.all || sc.table
	if listed {
		svcs, err := k.IPVS.Services(ctx)
		if err != nil {
			return planner.Actual{}, nil, err
		}
		table := make(map[ipvs.ServiceKey]ipvs.Service, len(svcs))
		for _, s := range svcs {
			table[s.ServiceKey] = s
			cur, known := view.Services.Get(s.ServiceKey)
			if (sc.all || !known || !cur.SameOptions(s)) && ours(s.ServiceKey) {
				keys[s.ServiceKey] = true
			}
			cur.Service = s
			view.Services.Set(s.ServiceKey, cur)
		}
		for key := range view.Services.Keys() {
			if _, ok := table[key]; !ok {
				view.Services.Delete(key)
				if ours(key) {
					keys[key] = true // gone: add it back
				}
			}
		}
		if sc.all {
			for _, vs := range d.Services {
				keys[vs.ServiceKey] = true
			}
		}
	}
	for key := range keys {
		if !listed {
			s, err := k.IPVS.Service(ctx, key)
			if errors.Is(err, ipvs.ErrNotFound) {
				view.Services.Delete(key)
				continue
			}
			if err != nil {
				return planner.Actual{}, nil, err
			}
			cur := view.Services.At(key)
			cur.Service = s
			view.Services.Set(key, cur)
		}
		cur, ok := view.Services.Get(key)
		if !ok {
			continue // not in the kernel: nothing to read
		}
		dsts, err := k.destinations(ctx, key)
		if err != nil {
			return planner.Actual{}, nil, err
		}
		cur.Destinations, cur.ReadAt = dsts, now
		view.Services.Set(key, cur)
	}
	if sc.all || sc.globals {
		g, err := k.readGlobals(ctx, d)
		if err != nil {
			return planner.Actual{}, nil, err
		}
		view.NATDigest, view.Sysctls, view.Daemons, view.Timeouts, view.TOA = g.NATDigest, g.Sysctls, g.Daemons, g.Timeouts, g.TOA
	}
	return view, slices.SortedFunc(maps.Keys(keys), ipvs.ServiceKey.Compare), nil
}

// retry puts what failed into the next pass (at the next Check): the
// services of failed ops, with the service table, since a failure often
// means the kernel is not as the agent thought; the globals for a failed
// sysctl, daemon or nftables op.
func (a *Agent) retry(ops []planner.Op, errs []error) {
	for i, op := range ops {
		if errs[i] == nil {
			continue
		}
		switch op.Kind {
		case planner.SetSysctl, planner.SetTimeouts, planner.StartDaemon, planner.StopDaemon, planner.ReplaceNAT, planner.RemoveNAT,
			planner.SetTOAServices, planner.AttachTOA, planner.DetachTOA, planner.RemoveTOA:
			a.pending.globals = true
		default:
			a.pending.add(op.Service.ServiceKey)
			a.pending.table = true
		}
	}
}

// syncHolder hands the VIP holder the data plane as programmed when that
// changed for it (or always, with force) and returns the address ops that
// followed.
func (a *Agent) syncHolder(ctx context.Context, d planner.Desired, actual planner.Actual, ops []planner.Op, errs []error, force bool) ([]planner.Op, error) {
	p := Programmed{Desired: Served(d, actual, ops, errs), InUse: a.unwanted.Addresses(ops),
		Eligible: a.eligibleVIPs.VIPs()}
	if !force && sameProgrammed(p, a.programmed) {
		return nil, nil
	}
	a.programmed = p
	a.opts.PeerFlows.SetRules(p.Desired)
	return a.holder.Sync(ctx, p)
}

// sameProgrammed reports whether the holder would see p and q alike.
func sameProgrammed(p, q Programmed) bool {
	pd, qd := p.Desired, q.Desired
	return pd.Interface == qd.Interface && pd.VIPDevice == qd.VIPDevice && reflect.DeepEqual(pd.Announce, qd.Announce) &&
		pd.NAT.Digest() == qd.NAT.Digest() && maps.Equal(p.InUse, q.InUse) && maps.Equal(p.Eligible, q.Eligible) &&
		slices.EqualFunc(pd.VIPs, qd.VIPs, func(a, b planner.VIPAddresses) bool {
			return a.VIP == b.VIP && a.Home == b.Home && slices.Equal(a.Addresses, b.Addresses) && slices.Equal(a.Needs, b.Needs) &&
				maps.Equal(a.Interfaces, b.Interfaces)
		}) && reflect.DeepEqual(pd.PeerSNAT, qd.PeerSNAT)
}

// sameGlobals reports whether the parts of the data plane outside IPVS
// services are the same in d and e: sysctls, sync daemons, nftables, IPVS
// timeouts, the TOA program.
func sameGlobals(d, e planner.Desired) bool {
	return maps.Equal(d.Sysctls, e.Sysctls) && slices.Equal(d.Daemons, e.Daemons) && d.NAT.Digest() == e.NAT.Digest() &&
		d.Timeouts == e.Timeouts && reflect.DeepEqual(d.TOA, e.TOA)
}
