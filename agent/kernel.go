package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/lvsd/lvsd/agent/planner"

	"github.com/lvsd/lvsd/arp"
	"github.com/lvsd/lvsd/arp/sysctl"
	"github.com/lvsd/lvsd/cluster/bgp"
	"github.com/lvsd/lvsd/ipvs"
	"github.com/lvsd/lvsd/nat"
	"github.com/lvsd/lvsd/nat/toa"
)

// Kernel is what the agent changes on its host (and, for a VIP handed over,
// in the cluster's connection sync), each part behind the small interface
// of the package that owns it. Tests pass the packages' fakes; cmd/lvsd
// builds the real ones. Only IPVS, NAT, Sysctls and Addrs are required.
type Kernel struct {
	IPVS    ipvs.Interface
	Daemons ipvs.SyncDaemons // the sync daemons; nil: connection sync impossible
	Conns   ConnectionTable  // read by resets, FULLNAT restores and the connection listing
	// Timeouts reads and sets the IPVS timeouts; nil: the agent file
	// must set none.
	Timeouts ipvs.TimeoutConfig
	NAT      nat.Interface
	// Conntrack restores FULLNAT connections' conntrack entries on
	// takeover; nil: no restore.
	Conntrack nat.ConntrackRestorer
	Sysctls   sysctl.Interface
	// Addrs holds the VIP addresses; in a cluster an arp.Leased, which adds
	// them with a lifetime it renews.
	Addrs arp.Addresses
	// Announcer announces added addresses; nil: no announcements (a
	// director alone, whose VIPs never move).
	Announcer arp.Announcer
	// Relay is the connection-sync relay; nil: no connection sync.
	Relay ConnSync
	// Routes announces VIPs to the routers over BGP; nil: no BGP.
	Routes Routes
	// Log gets what an op has to tell beyond its error (a restore's counts).
	Log *slog.Logger
	// TOA is the director's TOA program (client_address: toa); nil: this
	// host cannot run it, and a service asking for it fails its ops.
	TOA toa.Director
	// IPVSWriters is how many IPVS writes Apply runs at once in a long
	// run of them (a cold start), for different services; ≤ 1: one at a
	// time. IPVS must then take that many concurrent writes usefully
	// (ipvs.Writers for the kernel's).
	IPVSWriters int
}

// ConnectionTable reads the IPVS connection table: whole (a reset waits
// for entries to go, a FULLNAT restore copies them), or entry by entry for
// a listing that keeps a few of millions (ipvs.Kernel, ipvs.ConnFake).
type ConnectionTable interface {
	ipvs.ConnectionLister
	ipvs.ConnectionWalker
}

// Routes announces routes to the routers (a BGP speaker). Implementations
// must be safe for concurrent use.
type Routes interface {
	// Update announces the routes of announce (new or changed) and
	// withdraws the prefixes of withdraw, together.
	Update(ctx context.Context, announce []bgp.Route, withdraw []netip.Prefix) error
}

// expiryTimeout bounds how long a reset waits for the kernel to drop the
// connection entries of its deleted destinations (measured: within 0.13 s).
const expiryTimeout = 2 * time.Second

// ReadActual reads back the data plane d is made of: all IPVS services with
// their destinations, the digest of lvsd's nft tables, the sysctls d sets
// and the sync daemons (`lvsd plan`; the agent reads back what it must,
// readBack).
func (k Kernel) ReadActual(ctx context.Context, d planner.Desired) (planner.Actual, error) {
	a, err := k.readGlobals(ctx, d)
	if err != nil {
		return planner.Actual{}, err
	}
	svcs, err := k.IPVS.Services(ctx)
	if err != nil {
		return planner.Actual{}, err
	}
	for _, s := range svcs {
		dsts, err := k.destinations(ctx, s.ServiceKey)
		if err != nil {
			return planner.Actual{}, err
		}
		a.Services.Set(s.ServiceKey, planner.ActualService{Service: s, Destinations: dsts})
	}
	return a, nil
}

// readGlobals reads back what is not IPVS services: the digest of lvsd's
// nft tables, the sysctls d sets, the IPVS timeouts when d sets one and
// the sync daemons.
// destinations reads the destinations of the service key for the agent's
// view of the kernel, which keeps them until the next read: a destination
// without traffic since it was added gets the one shared zero of
// noTraffic instead of counters of its own (80 bytes each, ~8 MiB at
// 10,000 services × 10 backends, most of them idle in a test or a standby
// pool). Counters are never modified in place, only replaced.
func (k Kernel) destinations(ctx context.Context, key ipvs.ServiceKey) ([]ipvs.Destination, error) {
	dsts, err := k.IPVS.Destinations(ctx, key)
	for i := range dsts {
		if s := dsts[i].Stats; s != nil && *s == (ipvs.Stats{}) {
			dsts[i].Stats = &noTraffic
		}
	}
	return dsts, err
}

// noTraffic is the counters of every destination without traffic in the
// view of the kernel. Never written.
var noTraffic ipvs.Stats

func (k Kernel) readGlobals(ctx context.Context, d planner.Desired) (planner.Actual, error) {
	a := planner.Actual{Sysctls: map[string]string{}}
	var err error
	if a.NATDigest, err = k.NAT.Installed(ctx); err != nil {
		return planner.Actual{}, err
	}
	for key := range d.Sysctls {
		v, err := k.Sysctls.Get(ctx, key)
		switch {
		case errors.Is(err, sysctl.ErrMissing):
			continue // planned as missing; setting it says why it fails
		case err != nil:
			return planner.Actual{}, err
		}
		a.Sysctls[key] = v
	}
	if !d.Timeouts.IsZero() {
		if k.Timeouts == nil {
			return planner.Actual{}, errors.New("this IPVS handle cannot read or set timeouts")
		}
		if a.Timeouts, err = k.Timeouts.Timeouts(ctx); err != nil {
			return planner.Actual{}, err
		}
	}
	if k.Daemons != nil { // also without connection sync: lvsd's daemons must then stop
		if a.Daemons, err = k.Daemons.Daemons(ctx); err != nil {
			return planner.Actual{}, err
		}
	}
	if a.TOA, err = k.readTOA(ctx); err != nil {
		return planner.Actual{}, err
	}
	return a, nil
}

// readTOA reads back the TOA program; zero without one.
func (k Kernel) readTOA(ctx context.Context) (planner.TOA, error) {
	if k.TOA == nil || !k.TOA.Pinned() {
		return planner.TOA{}, nil
	}
	ifaces, err := k.TOA.Attached(ctx)
	if err != nil {
		return planner.TOA{}, err
	}
	outdated, err := k.TOA.Outdated(ctx)
	if err != nil {
		return planner.TOA{}, err
	}
	vips, err := k.TOA.Services(ctx)
	if err != nil {
		return planner.TOA{}, err
	}
	slices.Sort(ifaces)
	slices.Sort(outdated)
	slices.SortFunc(vips, netip.AddrPort.Compare)
	return planner.TOA{Interfaces: ifaces, Outdated: outdated, Services: vips, Pinned: true}, nil
}

// applyTOA runs an op of the TOA program.
func (k Kernel) applyTOA(ctx context.Context, op planner.Op) error {
	if k.TOA == nil {
		if op.Kind == planner.RemoveTOA {
			return nil
		}
		return errors.New("this host cannot run the TOA program (client_address: toa)")
	}
	switch op.Kind {
	case planner.SetTOAServices:
		return k.TOA.SetServices(ctx, op.TOAServices)
	case planner.AttachTOA:
		return k.TOA.Attach(ctx, op.Interface)
	case planner.DetachTOA:
		return k.TOA.Detach(ctx, op.Interface)
	}
	return k.TOA.Remove(ctx)
}

// readServices reads the IPVS services keys with their destinations, one
// request each (those not in the kernel are left out).
func (k Kernel) readServices(ctx context.Context, keys []ipvs.ServiceKey) (planner.Actual, error) {
	var a planner.Actual
	for _, key := range keys {
		s, err := k.IPVS.Service(ctx, key)
		if errors.Is(err, ipvs.ErrNotFound) {
			continue
		}
		if err != nil {
			return planner.Actual{}, err
		}
		dsts, err := k.destinations(ctx, key)
		if err != nil {
			return planner.Actual{}, err
		}
		a.Services.Set(key, planner.ActualService{Service: s, Destinations: dsts})
	}
	return a, nil
}

// Apply runs ops in order and returns each one's error (nil: done). It goes
// on after a failed op (one bad backend must not hold back the others),
// except where a later op depends on the failed one: a sync daemon is not
// started without its nftables guard, an address that could not be added is
// not announced, a destination is not moved, nor its sysctl set back, when
// the sysctl could not be held for the move (Op.Hold).
func (k Kernel) Apply(ctx context.Context, ops []planner.Op) []error {
	errs := make([]error, len(ops))
	natFailed := false
	notAdded := map[netip.Prefix]bool{}
	var notHeld string // the sysctl whose HoldForMove failed, until its release
	for i := 0; i < len(ops); i++ {
		op := ops[i]
		if isRoute(op.Kind) {
			// One update for a run of route ops: the speaker diffs its
			// whole table each time.
			j := i + 1
			for j < len(ops) && isRoute(ops[j].Kind) {
				j++
			}
			k.applyRoutes(ctx, ops[i:j], errs[i:j], notAdded)
			i = j - 1
			continue
		}
		if k.IPVSWriters > 1 && spreadable(op.Kind) {
			j := i + 1
			for j < len(ops) && spreadable(ops[j].Kind) {
				j++
			}
			if j-i >= minSpread {
				k.applySpread(ctx, ops[i:j], errs[i:j])
				i = j - 1
				continue
			}
		}
		switch {
		case op.Kind == planner.StartDaemon && natFailed:
			errs[i] = fmt.Errorf("%s: not started: its nftables guard could not be installed", op.Daemon)
		case op.Kind == planner.Announce && notAdded[op.Address]:
			errs[i] = fmt.Errorf("announcing %s: not added", op.Address)
		case op.Kind == planner.MoveDestination && notHeld != "":
			errs[i] = fmt.Errorf("not moved: %s could not be held", notHeld)
		case op.Hold == planner.ReleaseAfterMove && notHeld != "":
			errs[i] = fmt.Errorf("%s not set back: it could not be held", op.Key)
			notHeld = ""
		default:
			errs[i] = k.apply(ctx, op)
		}
		if errs[i] != nil {
			if op.Kind == planner.ReplaceNAT && !natFailed {
				errs[i] = errors.Join(errs[i], k.stopUnguardedDaemons(ctx))
			}
			natFailed = natFailed || op.Kind == planner.ReplaceNAT
			// Only an address op has an address (Op.Detail).
			if op.Kind == planner.AddAddress {
				notAdded[op.Address] = true
			}
			if op.Hold == planner.HoldForMove {
				notHeld = op.Key
			}
		}
	}
	return errs
}

// stopUnguardedDaemons stops lvsd's sync daemons after its nftables tables
// could not be written: the tables (flushed by someone, say) may no longer
// hold the guard that keeps other users off the daemons' ports, and a
// backup daemon applies whatever reaches it. The next pass starts them
// again with the guard.
func (k Kernel) stopUnguardedDaemons(ctx context.Context) error {
	if k.Daemons == nil {
		return nil
	}
	running, err := k.Daemons.Daemons(ctx)
	if err != nil {
		return fmt.Errorf("sync daemons left running without their nftables guard: %w", err)
	}
	var errs []error
	for _, d := range running {
		if d.SyncID != planner.SyncID {
			continue // another program's
		}
		if err := k.Daemons.StopDaemon(ctx, d.State); err != nil {
			errs = append(errs, fmt.Errorf("%s left running without its nftables guard: %w", d, err))
		}
	}
	return errors.Join(errs...)
}

func (k Kernel) apply(ctx context.Context, op planner.Op) error {
	key := op.Service.ServiceKey
	switch op.Kind {
	case planner.SetSysctl:
		return sysctlError(k.Sysctls.Set(ctx, op.Key, op.Value))
	case planner.SetTimeouts:
		if k.Timeouts == nil {
			return errors.New("this IPVS handle cannot set timeouts")
		}
		return k.Timeouts.SetTimeouts(ctx, op.Timeouts)
	case planner.AddService:
		return k.IPVS.AddService(ctx, op.Service)
	case planner.UpdateService:
		return k.IPVS.UpdateService(ctx, op.Service)
	case planner.DeleteService:
		return ignore(k.IPVS.DeleteService(ctx, key), ipvs.ErrNotFound)
	case planner.AddDestination:
		return k.IPVS.AddDestination(ctx, key, op.Destination)
	case planner.UpdateDestination:
		return k.IPVS.UpdateDestination(ctx, key, op.Destination)
	case planner.DeleteDestination:
		return ignore(k.IPVS.DeleteDestination(ctx, key, op.Destination.DestinationKey), ipvs.ErrNotFound)
	case planner.MoveDestination:
		return k.move(ctx, op)
	case planner.ReplaceNAT:
		return k.NAT.Apply(ctx, op.NAT)
	case planner.RemoveNAT:
		return k.NAT.Remove(ctx)
	case planner.AwaitExpiry:
		// On a timeout the re-add that follows revives what is left: those
		// connections go on, the others are gone. Worth an error, not a stop.
		wctx, cancel := context.WithTimeout(ctx, expiryTimeout)
		defer cancel()
		if err := ipvs.AwaitExpiry(wctx, k.Conns, op.Expiring); err != nil {
			return fmt.Errorf("resetting connections of %s: %w", key, err)
		}
		return nil
	case planner.StartDaemon, planner.StopDaemon:
		return k.applyDaemon(ctx, op)
	case planner.RestoreConntrack:
		return k.restore(ctx, op.NAT, op.VIPs)
	case planner.AddAddress:
		return k.Addrs.Add(ctx, op.Interface, op.Address)
	case planner.Announce:
		if k.Announcer == nil {
			return nil
		}
		return k.Announcer.Announce(ctx, op.Interface, op.Address.Addr())
	case planner.DeleteAddress:
		return ignore(k.Addrs.Delete(ctx, op.Interface, op.Address), arp.ErrNotFound)
	case planner.SetTOAServices, planner.AttachTOA, planner.DetachTOA, planner.RemoveTOA:
		return k.applyTOA(ctx, op)
	case planner.ReleaseConnections:
		if k.Relay == nil {
			return nil
		}
		for _, v := range op.VIPs {
			k.Relay.ReleaseVIP(v)
		}
		return nil
	}
	return fmt.Errorf("unknown op %v", op.Kind)
}

// move deletes a destination and adds it again, which puts it at the head
// of the kernel's list. The plan holds expire_nodest_conn at 0 around it
// (appendMove says why), so the add takes the destination back from the
// kernel's trash with its connections.
func (k Kernel) move(ctx context.Context, op planner.Op) error {
	key := op.Service.ServiceKey
	if err := ignore(k.IPVS.DeleteDestination(ctx, key, op.Destination.DestinationKey), ipvs.ErrNotFound); err != nil {
		return err
	}
	return k.IPVS.AddDestination(ctx, key, op.Destination)
}

func (k Kernel) applyDaemon(ctx context.Context, op planner.Op) error {
	if k.Daemons == nil {
		return errors.New("this IPVS handle cannot run sync daemons")
	}
	if op.Kind == planner.StopDaemon {
		return k.Daemons.StopDaemon(ctx, op.Daemon.State)
	}
	_, err := k.Daemons.StartDaemon(ctx, op.Daemon)
	return err
}

func isRoute(k planner.OpKind) bool { return k == planner.AnnounceRoute || k == planner.WithdrawRoute }

// applyRoutes runs a run of route ops as one update, setting every op's
// error. A VIP whose address could not be added is not announced.
func (k Kernel) applyRoutes(ctx context.Context, ops []planner.Op, errs []error, notAdded map[netip.Prefix]bool) {
	var announce []bgp.Route
	var withdraw []netip.Prefix
	for i, op := range ops {
		switch {
		case op.Kind == planner.WithdrawRoute:
			withdraw = append(withdraw, op.Route.Prefix)
		case notAdded[op.Route.Prefix]:
			errs[i] = fmt.Errorf("announcing %s: its address could not be added", op.Route.Prefix)
		default:
			announce = append(announce, op.Route)
		}
	}
	var err error
	if k.Routes == nil {
		err = errors.New("no BGP speaker")
	} else if len(announce)+len(withdraw) > 0 {
		err = k.Routes.Update(ctx, announce, withdraw)
	}
	for i := range errs {
		if errs[i] == nil {
			errs[i] = err
		}
	}
}

// ignore treats err as success when it wraps target: a delete that finds
// its object already gone has done its job.
func ignore(err, target error) error {
	if errors.Is(err, target) {
		return nil
	}
	return err
}

// sysctlError says what to do about a sysctl that cannot be set.
func sysctlError(err error) error {
	var e *sysctl.Error
	switch {
	case err == nil:
		return nil
	case errors.Is(err, sysctl.ErrMissing) && errors.As(err, &e) && strings.HasPrefix(e.Key, ipvs.SysctlPrefix):
		return fmt.Errorf("%w (is the ip_vs module loaded? modprobe ip_vs)", err)
	case errors.Is(err, sysctl.ErrReadOnly):
		return fmt.Errorf("%w (read-only /proc/sys? set it on the host or in /etc/sysctl.d)", err)
	}
	return err
}
