package agent

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/lvsd/lvsd/agent/health"
	"github.com/lvsd/lvsd/cluster"
	"github.com/lvsd/lvsd/cluster/bgp"
	"github.com/lvsd/lvsd/cluster/connsync"
	"github.com/lvsd/lvsd/ipvs"
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
	Config       *Config // already loaded from ConfigPath; nil: Run loads it
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
type Agent struct {
	opts        Options
	log         *slog.Logger
	holder      *Holder
	cfg         *Config
	fingerprint [32]byte
	owned       Ownership
	drains      Drains
	snap        atomic.Pointer[snapshot] // the last pass, for Status on other goroutines
	eligibility map[string]Eligibility   // last decision per service, to log changes
	reconciled  bool                     // a pass has logged "reconciled"
	// applied is the decision per service whose connection resets were
	// last planned: a pass that fails before planning keeps it, so a
	// transition it saw is not lost.
	applied map[string]Eligibility
	loaded  ConfigLoad // the last attempt to load the configuration (metrics.go)
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
	return &Agent{opts: opts, log: opts.Log, holder: opts.Holder, drains: Drains{}}
}

// Run loads the configuration, adopts what lvsd owns in the kernel, and
// reconciles until ctx ends: at once, on every value from reload (SIGHUP),
// when a configuration file changes (checked every Check), every Check while
// destinations drain, and every Resync to correct drift. Reading the kernel
// back is the costly part (one dump per service), hence the two periods. A
// configuration that fails to load at start is an error; at a reload it is
// logged and the last good one stays in force. Stopping leaves the kernel as
// it is, so a restart costs no connection.
func (a *Agent) Run(ctx context.Context, reload <-chan struct{}) error {
	if err := a.start(); err != nil {
		return err
	}
	a.reconcile(ctx)
	lastFull, pending := a.opts.Now(), a.fingerprint

	tick := time.NewTicker(a.opts.Check)
	defer tick.Stop()
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
			a.reload("signal")
		case <-healthChanged:
		case <-tick.C:
			// A file is reloaded once it stayed the same for a whole check
			// period: an editor's truncate-then-write must not be read half
			// way (an empty file is a valid file with no services).
			fp := a.configFingerprint()
			settled := fp == pending
			pending = fp
			if fp != a.fingerprint && settled {
				a.reload("file change")
			} else if len(a.drains) == 0 && a.opts.Now().Sub(lastFull) < a.opts.Resync {
				continue
			}
		}
		a.reconcile(ctx)
		lastFull = a.opts.Now()
	}
}

// start loads the configuration and the ownership record.
func (a *Agent) start() error {
	cfg := a.opts.Config
	if cfg == nil {
		var err error
		if cfg, err = LoadConfig(a.opts.ConfigPath); err != nil {
			return err
		}
	}
	a.setConfig(cfg)
	a.loadedConfig(a.opts.Now(), nil)
	var err error
	if a.owned, err = LoadOwnedServices(cfg.Agent.StateDir); err != nil {
		return fmt.Errorf("reading ownership record: %w", err)
	}
	if a.holder == nil {
		if a.holder, err = NewHolder(a.opts.Kernel, nil, cfg.Agent.StateDir, a.log); err != nil {
			return fmt.Errorf("reading address record: %w", err)
		}
	}
	a.log.Info("starting", "config", a.opts.ConfigPath, "services", len(cfg.Services),
		"ipvs_services", len(cfg.Desired.Services), "owned_services", len(a.owned.Services))
	return nil
}

func (a *Agent) setConfig(cfg *Config) {
	a.cfg = cfg
	a.fingerprint = a.configFingerprint()
	if a.opts.Health != nil {
		a.opts.Health.Set(HealthTargets(cfg.Services))
	}
	if a.opts.ConnSync != nil {
		a.opts.ConnSync.SetServices(SyncServices(cfg.Desired))
	}
}

func (a *Agent) reload(why string) {
	cfg, err := LoadConfig(a.opts.ConfigPath)
	a.loadedConfig(a.opts.Now(), err)
	if err != nil {
		// Remember the broken files' fingerprint so the error is logged once,
		// not at every tick, and the last good configuration stays.
		a.fingerprint = a.configFingerprint()
		a.log.Error("configuration rejected; keeping the last good one", "trigger", why, "err", err)
		return
	}
	if old := a.cfg.Agent.Cluster; !reflect.DeepEqual(old, cfg.Agent.Cluster) {
		// The cluster node and the relay keep the settings they started with;
		// only the kernel side (sync daemons, sysctls, guard) follows now.
		a.log.Warn("cluster settings changed: the cluster node and connection-sync relay keep the old ones until lvsd restarts; "+
			"the sync daemons follow conn_sync now", "trigger", why)
	}
	a.setConfig(cfg)
	a.log.Info("configuration reloaded", "trigger", why, "services", len(cfg.Services),
		"ipvs_services", len(cfg.Desired.Services))
}

// reconcile brings the data plane to the desired state once, then hands
// it to the VIP holder, and returns the ops both applied. Failures are
// logged and retried at the next trigger.
func (a *Agent) reconcile(ctx context.Context) []Op {
	start := a.opts.Now()
	var states map[string]health.State
	if a.opts.Health != nil {
		states = a.opts.Health.Snapshot()
	}
	desired, decisions := WithHealth(a.cfg.Desired, a.cfg.Services, backendHealth(states))
	a.logEligibility(decisions)
	resets, applied := connectionResets(a.applied, decisions, a.cfg.Services)
	actual, err := a.opts.Kernel.ReadActual(ctx, desired)
	if err != nil {
		a.log.Error("reading kernel state", "err", err)
		var last Actual
		if prev := a.snap.Load(); prev != nil {
			last = prev.actual
		}
		a.publish(desired, last, start, err)
		return nil
	}
	ops, drains := Plan(PlanInput{Desired: desired, Actual: actual, Owned: a.owned, Drains: a.drains,
		Now: a.opts.Now(), DrainTimeout: a.opts.DrainTimeout, Resets: resets})
	a.applied, a.drains = applied, drains
	a.logResets(desired, ops)
	errs, applyErr := a.apply(ctx, desired, ops)
	a.forgetResetConnections(ops)
	held, holdErr := a.holder.Sync(ctx, Programmed{Desired: Served(desired, actual, ops, errs),
		InUse: AddressesInUse(desired, actual, ops), Eligible: EligibleVIPs(desired)})
	after := actual.After(ops, errs)
	ops = append(ops, held...)
	if err := errors.Join(applyErr, holdErr); err != nil {
		applyErr = err
		a.log.Error("some changes failed; will retry", "err", err)
	}
	a.publish(desired, after, start, applyErr, ops...)
	// Passes that change nothing stay quiet, except the first: after a
	// restart it says the kernel was adopted as it was.
	if len(ops) > 0 || !a.reconciled {
		a.reconciled = true
		a.log.Info("reconciled", "ops", len(ops), "changes", summarize(ops), "duration", a.opts.Now().Sub(start).String())
	}
	return ops
}

// apply runs the data-plane ops with the ownership record written ahead
// and returns each op's error and all of them joined.
func (a *Agent) apply(ctx context.Context, d Desired, ops []Op) ([]error, error) {
	keys := make([]ipvs.ServiceKey, len(d.Services))
	for i, vs := range d.Services {
		keys[i] = vs.ServiceKey // configured: lvsd's from now on, adopted if found
	}
	intended := a.owned.Intend(ops).Adopt(keys)
	if err := a.saveOwned(intended); err != nil {
		err = fmt.Errorf("saving ownership record; nothing applied: %w", err)
		errs := make([]error, len(ops))
		for i := range errs {
			errs[i] = err
		}
		return errs, err
	}
	errs := a.opts.Kernel.Apply(ctx, ops)
	if err := a.saveOwned(intended.After(ops, errs)); err != nil {
		a.log.Error("saving ownership record", "err", err)
	}
	logOps(a.log, ops, errs)
	return errs, errors.Join(errs...)
}

func (a *Agent) saveOwned(o Ownership) error {
	if o.Equal(a.owned) {
		return nil
	}
	if err := SaveOwnedServices(a.cfg.Agent.StateDir, o); err != nil {
		return err
	}
	a.owned = o
	return nil
}

// Served narrows d's VIPs to those whose IPVS services are all in the
// kernel after ops ran with errs: a VIP whose service could not be added is
// not held, since it would attract traffic nothing forwards. Pure.
func Served(d Desired, a Actual, ops []Op, errs []error) Desired {
	failed := map[ipvs.ServiceKey]bool{}
	for i, op := range ops {
		if op.Kind == AddService && errs[i] != nil && !errors.Is(errs[i], ipvs.ErrExists) {
			failed[op.Service.ServiceKey] = true
		}
	}
	if len(failed) == 0 {
		return d
	}
	missing := map[netip.Addr]bool{}
	for _, vs := range d.Services {
		if _, ok := a.Services[vs.ServiceKey]; !ok && failed[vs.ServiceKey] {
			missing[vs.VIP] = true
		}
	}
	out := d
	out.VIPs = slices.DeleteFunc(slices.Clone(d.VIPs), func(v VIPAddresses) bool { return missing[v.VIP] })
	return out
}

// maxOpsLogged bounds the per-change log lines at info level: a cold start
// of thousands of objects is summarized (each op is still logged at debug).
const maxOpsLogged = 50

// logOps logs each op with its error, if any.
func logOps(log *slog.Logger, ops []Op, errs []error) {
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

// summarize counts ops by kind, e.g. "add-service=2 add-destination=20".
func summarize(ops []Op) string {
	var counts [len(opNames)]int
	for _, op := range ops {
		counts[op.Kind]++
	}
	var parts []string
	for k, n := range counts {
		if n > 0 {
			parts = append(parts, fmt.Sprintf("%s=%d", OpKind(k), n))
		}
	}
	return strings.Join(parts, " ")
}

// forgetResetConnections tells the connection-sync relay which connections
// the resets among ops dropped, so it stops replaying them to the other
// directors: they would come back there, bound to the backend they left.
func (a *Agent) forgetResetConnections(ops []Op) {
	if a.opts.ConnSync == nil {
		return
	}
	for _, op := range ops {
		if op.Kind != AwaitExpiry {
			continue
		}
		var dests []netip.AddrPort
		for _, d := range op.Expiring.Dests {
			dests = append(dests, netip.AddrPortFrom(d.Addr, d.Port))
		}
		a.opts.ConnSync.ForgetDestinations(op.Expiring.VIP, dests)
	}
}

// configFingerprint hashes the names, sizes and modification times of the
// agent file and the service files, cheaply detecting edits.
func (a *Agent) configFingerprint() [32]byte {
	h := sha256.New()
	add := func(path string) {
		if fi, err := os.Stat(path); err == nil {
			fmt.Fprintf(h, "%s %d %d\n", path, fi.Size(), fi.ModTime().UnixNano())
		}
	}
	add(a.opts.ConfigPath)
	if a.cfg != nil && a.cfg.Agent.ServicesDir != "" {
		entries, err := os.ReadDir(a.cfg.Agent.ServicesDir)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			fmt.Fprintf(h, "error %v\n", err)
		}
		for _, e := range entries {
			add(filepath.Join(a.cfg.Agent.ServicesDir, e.Name()))
		}
	}
	var sum [32]byte
	copy(sum[:], h.Sum(nil))
	return sum
}
