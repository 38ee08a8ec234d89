package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"slices"
	"sync/atomic"
	"time"

	"github.com/lvsd/lvsd/agent/apply"
	"github.com/lvsd/lvsd/agent/config"
	"github.com/lvsd/lvsd/agent/planner"

	"github.com/lvsd/lvsd/cluster"
	"github.com/lvsd/lvsd/cluster/bgp"
	"github.com/lvsd/lvsd/cluster/connsync"
	"github.com/lvsd/lvsd/ipvs"
	"github.com/lvsd/lvsd/nat"
)

// Defaults of the reconciler.
const (
	DefaultResync       = 30 * time.Second
	DefaultCheck        = 2 * time.Second
	DefaultDrainTimeout = 30 * time.Second
)

// Options configure an Agent.
type Options struct {
	ConfigPath   string
	Config       *LoadedConfig // already loaded from ConfigPath; nil: Run loads it
	Kernel       Kernel
	Log          *slog.Logger
	Resync       time.Duration // how often the whole kernel state is read back and corrected
	Check        time.Duration // how often config files and drains in progress are checked
	DrainTimeout time.Duration // how long a removed destination keeps its connections
	Now          func() time.Time
	// Holder puts the held VIPs' addresses on the interface after each
	// pass; nil: the agent makes one that holds every VIP.
	Holder *Holder
	// Health checks backends; nil: no checks, every backend counts as healthy.
	Health HealthChecker
	// Cluster shows the director cluster in the status; nil: no cluster.
	Cluster ClusterViewer
	// ConnSync is the connection-sync relay, for the status and the
	// metrics, and to forget reset connections; nil: no connection sync.
	ConnSync ConnSync
	// BGP is the BGP speaker, for the status and the metrics; nil: no BGP.
	BGP BGPViewer
	// Events takes the backends' health transitions for the operator's
	// hooks; nil: none.
	Events Events
	// PeerFlows creates the conntrack entries of the other directors'
	// FULLNAT connections under ECMP (peerflows.go); nil: none.
	PeerFlows *PeerFlows
	// ConfigDigest is told the digest of the service configuration at
	// every load that changes a service; nil: no cluster.
	ConfigDigest ConfigAdvertiser
	// ConfigAgreement tells what the other directors advertise of their
	// configurations, so that a changed service goes in force on all of
	// them together (cluster.coordinated_changes, coordinate.go); nil:
	// each change goes in force when loaded.
	ConfigAgreement ConfigAgreement
}

// BGPViewer reports the BGP speaker's sessions and routes.
type BGPViewer interface {
	Status(ctx context.Context) (bgp.Status, error)
}

// ConnSync is what the agent uses of the connection-sync relay
// (connsync.Relay). Implementations must be safe for concurrent use.
type ConnSync interface {
	// Stats returns the relay's counters.
	Stats() connsync.Stats
	// ForgetDestinations drops the relay's copies of connections of vip to
	// dests (port 0: any), which a reset dropped from the kernel.
	ForgetDestinations(vip netip.Addr, dests []netip.AddrPort)
	// ReleaseVIP says another director holds vip now: the connections to
	// it are that director's to send.
	ReleaseVIP(vip netip.Addr)
	// SetServices sets the services whose records the relay applies: those
	// configured here (SyncServices).
	SetServices(list []connsync.Service)
}

// ClusterViewer reports the director cluster as this director sees it.
type ClusterViewer interface {
	View(ctx context.Context) (cluster.View, error)
}

// Agent keeps the data plane in step with the configuration: IPVS,
// nftables, sysctls, sync daemons; after each pass it hands what it
// programmed to the VIP holder. Its state is owned by the goroutine running
// Run; nothing else may touch it.
//
// A pass costs what changed, not what exists: the agent keeps the
// configuration as read (Reloader), the desired state with health applied,
// and the kernel as last read, and each trigger adds to the next pass only
// what it may have changed (scope.go). A rotating audit reads the rest back
// at a bounded share of the time (audit.go).
type Agent struct {
	opts   Options
	log    *slog.Logger
	holder *Holder
	loader *Reloader
	cfg    *LoadedConfig
	owned  planner.Ownership
	// ownedSaves counts the writes of the ownership record, each with an
	// fsync: a pass's cost in the kernel's time (claimAhead).
	ownedSaves int
	drains     planner.Drains
	snap       atomic.Pointer[Snapshot] // the last pass, for the views on other goroutines (published.go)

	// desired is cfg.Desired with health applied (applyHealth); health
	// the backends' health it was computed with.
	desired planner.Desired
	health  map[string]planner.BackendHealth
	// eligibility is the last decision per service, replaced (never
	// modified) when one changes: the snapshot shares it.
	eligibility planner.CopyOnWriteMap[string, planner.Eligibility]
	// eligibleVIPs are EligibleVIPs(desired).
	eligibleVIPs planner.EligibleVIPCount
	// applied is the decision per service whose connection resets were
	// last planned, and unapplied the services decided anew since: a pass
	// that fails before planning keeps them, so a transition it saw is not
	// lost. applied is a copy of eligibility as the last plan saw it,
	// sharing what it holds, but for carried: the services whose applied
	// decision kept an earlier pool (ConnectionResets).
	applied   planner.CopyOnWriteMap[string, planner.Eligibility]
	carried   map[string]bool
	unapplied map[string]bool
	loaded    ConfigLoad // the last attempt to load the configuration (published.go)
	// actual is the kernel as last read back, with the ops applied since;
	// replaced, never modified (the snapshot shares it).
	actual     planner.Actual
	pending    scope // what the next pass looks at
	programmed Programmed
	// unwanted are the kernel's IPVS services lvsd does not want, as of the
	// last pass (nil: look at every service next pass).
	unwanted   planner.UnwantedServices
	audit      audit
	reconciled bool // a pass has logged "reconciled"
	// loadGarbage says a full load happened since the last pass: the loop
	// returns the load's memory after that pass (memory.go).
	loadGarbage bool
	memoryLimit int64 // the soft memory limit set (memory.go); 0: none yet
	// watch names the configuration files that changed (nil: scan them
	// every Check). fingerprint is the files' stamps as last loaded,
	// scanned as last scanned; nextScan when the next scan is due, after
	// what the last scans cost.
	watch       *configWatch
	fingerprint [32]byte
	scanned     [32]byte
	nextScan    time.Time
	scanCosts   scanCosts
	// overrides are the operator's (`lvsd backend`), as recorded in
	// state_dir; reqs carries their changes to the loop, which closes
	// stopped when it returns.
	overrides planner.Overrides
	// held is a loaded change that waits for the other directors (nil:
	// none); coordination what the status shows of it (coordinate.go).
	held         *heldChange
	coordinate   config.CoordinatedChanges
	coordination Coordination
	reqs         chan backendRequest
	reloads      chan reloadRequest
	stopped      chan struct{}
}

// New returns an agent; Run starts it.
func New(opts Options) *Agent {
	if opts.Resync <= 0 {
		opts.Resync = DefaultResync
	}
	if opts.Check <= 0 {
		opts.Check = DefaultCheck
	}
	if opts.DrainTimeout <= 0 {
		opts.DrainTimeout = DefaultDrainTimeout
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Log == nil {
		opts.Log = slog.Default()
	}
	if opts.Events == nil {
		opts.Events = noEvents{}
	}
	return &Agent{opts: opts, log: opts.Log, holder: opts.Holder, drains: planner.Drains{},
		reqs: make(chan backendRequest), reloads: make(chan reloadRequest), stopped: make(chan struct{})}
}

// Run loads the configuration, adopts what lvsd owns in the kernel, and
// reconciles until ctx ends: at once, on every value from reload (SIGHUP),
// when a configuration file changes (checked every Check), when health
// changes, every Check while destinations drain, every Resync for a
// step of the audit, and for the service of every operator change
// (ChangeBackend). A configuration that fails to load at start is an
// error; at a reload it is logged and the last good one stays in force.
// Stopping leaves the kernel as it is, so a restart costs no connection.
func (a *Agent) Run(ctx context.Context, reload <-chan os.Signal) error {
	defer close(a.stopped)
	if err := a.start(); err != nil {
		return err
	}
	// Watched before the first pass, which takes minutes at 10,000
	// services: an edit made meanwhile waits in the inotify queue.
	a.watch = a.watchConfig()
	defer func() { a.watch.close() }() // the one in use then (nil-safe)
	natChanged := a.watchNAT(ctx)
	a.reconcile(ctx)
	a.settleMemory()

	tick := time.NewTicker(a.opts.Check)
	defer tick.Stop()
	agreementChanged := a.agreementChanged()
	var healthChanged <-chan struct{}
	if a.opts.Health != nil {
		healthChanged = a.opts.Health.Changed()
	}
	for {
		select {
		case <-ctx.Done():
			a.log.Info("stopping; kernel state left in place")
			return nil
		case <-reload:
			a.reload("signal", nil)
		case r := <-a.reqs:
			ov, after, err := a.changeBackend(ctx, r.change) // runs its pass
			r.reply <- backendReply{ov, after, err}
			continue
		case r := <-a.reloads:
			r.reply <- a.reloadAndApply(ctx) // runs its pass
			continue
		case <-healthChanged:
		case <-agreementChanged:
			a.decideHeld()
		case _, ok := <-natChanged:
			if !ok {
				a.log.Warn("watching nftables stopped; lvsd's tables are checked at the audit only")
				natChanged = nil
				continue
			}
			// Someone may have flushed lvsd's tables, and with them the
			// sync guard: the globals are read back now, not at the audit.
			a.pending.merge(scope{globals: true})
		case ev, ok := <-a.watch.events():
			if !ok {
				a.stopWatching("configuration watch stopped", nil)
				continue
			}
			a.watch.note(ev)
			continue
		case err, ok := <-a.watch.errors():
			if !ok {
				a.stopWatching("configuration watch stopped", nil)
				continue
			}
			a.log.Warn("configuration watch lost events; checking every file", "err", err)
			a.watch.lost()
			continue
		case <-tick.C:
			a.checkFiles()
			a.tick()
		}
		a.reconcile(ctx)
		a.settleMemory() // here, where the pass's own garbage is dead too
	}
}

// watchNAT returns the channel that tells when nftables objects were
// deleted (nat.Watcher), or nil when the tables cannot tell.
func (a *Agent) watchNAT(ctx context.Context) <-chan struct{} {
	w, ok := a.opts.Kernel.NAT.(nat.Watcher)
	if !ok {
		return nil
	}
	ch, err := w.Watch(ctx)
	if err != nil {
		a.log.Warn("cannot watch nftables; lvsd's tables are checked at the audit only", "err", err)
		return nil
	}
	return ch
}

// start loads the configuration and the ownership record.
func (a *Agent) start() error {
	a.loading()
	cfg := a.opts.Config
	if cfg == nil {
		var err error
		if cfg, err = LoadConfig(a.opts.ConfigPath); err != nil {
			return err
		}
	}
	a.loader = cfg.loader
	if a.loader == nil {
		a.loader = NewReloader(a.opts.ConfigPath)
	}
	var err error
	if a.overrides, err = LoadOverrides(cfg.Agent.StateDir); err != nil {
		return fmt.Errorf("reading the backend overrides: %w", err)
	}
	a.setConfig(cfg, Changes{All: true})
	a.coordinate = coordinateFrom(cfg)
	a.loadedConfig(a.opts.Now(), nil)
	a.fingerprint = a.configFingerprint()
	a.scanned = a.fingerprint
	if a.owned, err = LoadOwnedServices(cfg.Agent.StateDir); err != nil {
		return fmt.Errorf("reading ownership record: %w", err)
	}
	if a.holder == nil {
		if a.holder, err = NewHolder(a.opts.Kernel, nil, cfg.Agent.StateDir, a.log); err != nil {
			return fmt.Errorf("reading address record: %w", err)
		}
	}
	a.audit = audit{next: a.opts.Now().Add(a.opts.Resync)}
	a.log.Info("starting", "config", a.opts.ConfigPath, "services", len(cfg.Services),
		"ipvs_services", len(cfg.Desired.Services), "owned_services", len(a.owned.Services),
		"backend_overrides", len(a.overrides))
	return nil
}

// setConfig puts cfg in force; ch says what changed since the last one.
// What changed goes into the next pass.
func (a *Agent) setConfig(cfg *LoadedConfig, ch Changes) {
	prev := a.cfg
	a.cfg = cfg
	a.pruneOverrides()
	if a.opts.Health != nil && (ch.All || len(ch.Services) > 0) {
		switch {
		case ch.All:
			a.opts.Health.Set(HealthTargets(cfg.Services))
		case ch.Fresh != nil:
			a.opts.Health.Update(ch.Services, HealthTargets(cfg.servicesAt(ch.Fresh, ch.Services)))
		default:
			// A reload that checked every file (SIGHUP) knows which services
			// changed, not where they are: found by name, one edited service
			// hands its targets over, not every target. Set made and compared
			// 100,000 of them, 96 MB, for one weight edited.
			a.opts.Health.Update(ch.Services, HealthTargets(cfg.named(ch.Services)))
		}
	}
	if a.opts.ConnSync != nil && (ch.All || prev == nil || len(ch.Services) > 0) {
		a.opts.ConnSync.SetServices(planner.SyncServices(cfg.Desired))
	}
	if a.opts.ConfigDigest != nil && (ch.All || prev == nil || len(ch.Services) > 0) {
		a.opts.ConfigDigest.AdvertiseConfig(cfg.ConfigDigest())
	}
	if ch.All || prev == nil {
		a.loadGarbage = true // a full rebuild: garbage like a full load's
		a.applyHealth(nil)
		a.pending.merge(scope{all: true, globals: true, holder: true})
		a.passAfterLoad()
		return
	}
	a.applyHealthSince(prev, ch.Fresh, ch.Services)
	a.pending.add(prev.serviceKeys(ch.Services)...) // what they were
	a.pending.add(cfg.serviceKeys(ch.Services)...)  // what they are
	if !sameGlobals(prev.Desired, cfg.Desired) {
		a.pending.merge(scope{globals: true, holder: true})
	}
}

// tick adds what is due at a Check tick to the next pass: the services
// with destinations draining (their connections are counted again), a
// step of the audit.
func (a *Agent) tick() {
	for k := range a.drains {
		a.pending.add(k.Service)
	}
	a.decideHeld() // its wait may be over
	if now := a.opts.Now(); !now.Before(a.audit.next) {
		a.pending.merge(a.audit.step(a.desired, a.owned, now, a.opts.Resync))
	}
}

// reconcile takes in the backends' health, then brings the data plane to
// the desired state for what is pending (nothing pending: no pass), hands
// it to the VIP holder, and returns the ops both applied (a pass applied
// in parts keeps only some: pass) with their count by kind. Failures are
// logged and what failed is retried at the next Check.
func (a *Agent) reconcile(ctx context.Context) ([]planner.Op, planner.OpCounts) {
	a.refreshHealth()
	if a.pending.empty() {
		return nil, planner.OpCounts{}
	}
	sc := a.pending
	a.pending = scope{}
	return a.pass(ctx, sc)
}

// apply runs the data-plane ops with the ownership record written ahead
// and returns each op's error and all of them joined. The configured
// services among scope (nil: all) are lvsd's from now on, adopted if found.
func (a *Agent) apply(ctx context.Context, d planner.Desired, ops []planner.Op, scope []ipvs.ServiceKey) ([]error, error) {
	var keys []ipvs.ServiceKey
	if scope == nil {
		keys = make([]ipvs.ServiceKey, len(d.Services))
		for i, vs := range d.Services {
			keys[i] = vs.ServiceKey
		}
	}
	for _, k := range scope {
		if d.Wants(k) {
			keys = append(keys, k)
		}
	}
	applier := apply.Applier{Claims: planner.ClaimServices, Save: a.saveOwned, Run: a.opts.Kernel.Run}
	r, err := applier.Apply(ctx, a.owned, ops, keys)
	if err != nil {
		err = fmt.Errorf("saving ownership record; nothing applied: %w", err)
		errs := make([]error, len(ops))
		for i := range errs {
			errs[i] = err
		}
		return errs, err
	}
	if r.SaveErr != nil {
		a.log.Error("saving ownership record", "err", r.SaveErr)
	}
	logOps(a.log, ops, r.Errs)
	return r.Errs, errors.Join(r.Errs...)
}

func (a *Agent) saveOwned(o planner.Ownership) error {
	if o.Equal(a.owned) {
		return nil
	}
	if err := SaveOwnedServices(a.cfg.Agent.StateDir, o); err != nil {
		return err
	}
	a.ownedSaves++
	a.owned = o
	return nil
}

// Served narrows d's VIPs to those whose IPVS services are all in the
// kernel after ops ran with errs: a VIP whose service could not be added is
// not held, since it would attract traffic nothing forwards. Pure.
func Served(d planner.Desired, a planner.Actual, ops []planner.Op, errs []error) planner.Desired {
	failed := map[ipvs.ServiceKey]bool{}
	for i, op := range ops {
		if op.Kind == planner.AddService && errs[i] != nil && !errors.Is(errs[i], ipvs.ErrExists) {
			failed[op.Service.ServiceKey] = true
		}
	}
	if len(failed) == 0 {
		return d
	}
	missing := map[netip.Addr]bool{}
	for _, vs := range d.Services {
		if !a.Services.Has(vs.ServiceKey) && failed[vs.ServiceKey] {
			missing[vs.VIP] = true
		}
	}
	out := d
	out.VIPs = slices.DeleteFunc(slices.Clone(d.VIPs), func(v planner.VIPAddresses) bool { return missing[v.VIP] })
	return out
}

// maxOpsLogged bounds the per-change log lines at info level: a cold start
// of thousands of objects is summarized (each op is still logged at debug).
const maxOpsLogged = 50

// logOps logs each op with its error, if any.
func logOps(log *slog.Logger, ops []planner.Op, errs []error) {
	level := slog.LevelInfo
	if len(ops) > maxOpsLogged {
		level = slog.LevelDebug
	}
	for i, op := range ops {
		switch {
		case errs[i] != nil:
			log.Warn("failed", "op", op.Kind.String(), "object", op.String(), "err", errs[i])
		case log.Enabled(context.Background(), level):
			log.Log(context.Background(), level, "applied", "op", op.Kind.String(), "object", op.String())
		}
	}
}

// forgetResetConnections tells the connection-sync relay which connections
// the resets among ops dropped, so it stops replaying them to the other
// directors: they would come back there, bound to the backend they left.
func (a *Agent) forgetResetConnections(ops []planner.Op) {
	if a.opts.ConnSync == nil {
		return
	}
	for _, op := range ops {
		if op.Kind != planner.AwaitExpiry {
			continue
		}
		var dests []netip.AddrPort
		for _, d := range op.Expiring.Dests {
			dests = append(dests, netip.AddrPortFrom(d.Addr, d.Port))
		}
		a.opts.ConnSync.ForgetDestinations(op.Expiring.VIP, dests)
	}
}
