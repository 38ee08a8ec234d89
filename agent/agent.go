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
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/lvsd/lvsd/agent/health"
	"github.com/lvsd/lvsd/cluster"
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
	// VIPs decides which VIPs this director announces (puts on its
	// interface); nil means all of them. IPVS and nftables are programmed
	// for every service either way, so a standby takes over by adding an
	// address. The cluster package provides it.
	VIPs VIPOwnership
	// Health checks backends; nil: no checks, every backend counts as healthy.
	Health HealthChecker
	// Cluster shows the director cluster in the status; nil: no cluster.
	Cluster ClusterViewer
	// ConnSync is the connection-sync relay, for the status and the
	// metrics, and to forget reset connections; nil: no connection sync.
	ConnSync ConnSync
}

// ConnSync is what the agent uses of the connection-sync relay
// (connsync.Relay). Implementations must be safe for concurrent use.
type ConnSync interface {
	// Stats returns the relay's counters.
	Stats() connsync.Stats
	// ForgetDestinations drops the relay's copies of connections of vip to
	// dests (port 0: any), which a reset dropped from the kernel.
	ForgetDestinations(vip netip.Addr, dests []netip.AddrPort)
}

// ClusterViewer reports the director cluster as this director sees it.
type ClusterViewer interface {
	View(ctx context.Context) (cluster.View, error)
}

// VIPOwnership says which VIPs this node holds now. Changed delivers a value
// whenever the answer may have changed. Implementations must be safe for
// concurrent use.
type VIPOwnership interface {
	Holds(vip netip.Addr) bool
	Changed() <-chan struct{}
}

// Agent keeps the kernel in step with the configuration. Its state is owned
// by the goroutine running Run; nothing else may touch it.
type Agent struct {
	opts        Options
	log         *slog.Logger
	cfg         *Config
	fingerprint [32]byte
	owned       Ownership
	drains      map[drainKey]time.Time // when each unwanted destination went to weight 0
	// sysctlsLogged is what was last logged as required, so the log says
	// when lvsd turns forwarding on without repeating it every pass.
	sysctlsLogged string
	snap          atomic.Pointer[snapshot] // the last pass, for Status on other goroutines
	eligibility   map[string]Eligibility   // last decision per service, to log changes
	reconciled    bool                     // a pass has logged "reconciled"
	// applied is the decision per service whose connection resets were
	// last planned: a pass that fails before planning keeps it, so a
	// transition it saw is not lost.
	applied map[string]Eligibility
}

type drainKey struct {
	svc ipvs.ServiceKey
	dst ipvs.DestinationKey
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
	return &Agent{opts: opts, log: opts.Log, drains: map[drainKey]time.Time{}}
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
	cfg := a.opts.Config
	if cfg == nil {
		var err error
		if cfg, err = LoadConfig(a.opts.ConfigPath); err != nil {
			return err
		}
	}
	a.setConfig(cfg)
	var err error
	if a.owned, err = LoadOwnership(cfg.Agent.StateDir); err != nil {
		return fmt.Errorf("reading ownership record: %w", err)
	}
	a.log.Info("starting", "config", a.opts.ConfigPath, "services", len(cfg.Services),
		"ipvs_services", len(cfg.Desired.Services), "owned_services", len(a.owned.Services))
	a.reconcile(ctx)
	lastFull, pending := a.opts.Now(), a.fingerprint

	tick := time.NewTicker(a.opts.Check)
	defer tick.Stop()
	var ownership, healthChanged <-chan struct{}
	if a.opts.VIPs != nil {
		ownership = a.opts.VIPs.Changed()
	}
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
		case <-ownership:
			a.log.Info("VIP ownership changed")
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

func (a *Agent) setConfig(cfg *Config) {
	a.cfg = cfg
	a.fingerprint = a.configFingerprint()
	if a.opts.Health != nil {
		a.opts.Health.Set(HealthTargets(cfg.Services))
	}
}

func (a *Agent) reload(why string) {
	cfg, err := LoadConfig(a.opts.ConfigPath)
	if err != nil {
		// Remember the broken files' fingerprint so the error is logged once,
		// not at every tick, and the last good configuration stays.
		a.fingerprint = a.configFingerprint()
		a.log.Error("configuration rejected; keeping the last good one", "trigger", why, "err", err)
		return
	}
	a.setConfig(cfg)
	a.log.Info("configuration reloaded", "trigger", why, "services", len(cfg.Services),
		"ipvs_services", len(cfg.Desired.Services))
}

// reconcile brings the kernel to the desired state once and returns the ops
// it applied. Failures are logged and retried at the next trigger.
func (a *Agent) reconcile(ctx context.Context) []Op {
	start := a.opts.Now()
	desired := a.announced(a.cfg.Desired)
	var states map[string]health.State
	if a.opts.Health != nil {
		states = a.opts.Health.Snapshot()
	}
	desired, decisions := ApplyHealth(desired, a.cfg.Services, backendHealth(states))
	a.logEligibility(decisions)
	resets, applied := connectionResets(a.applied, decisions, a.cfg.Services)
	actual, err := a.opts.Kernel.ReadActual(ctx, desired.Interface)
	if err != nil {
		a.log.Error("reading kernel state", "err", err)
		a.publish(desired, start, err)
		return nil
	}
	if err := a.opts.Kernel.EnsureSysctls(ctx, desired); err != nil {
		a.log.Error("setting sysctls", "err", err)
	} else if need := sysctlNeeds(desired); need != a.sysctlsLogged {
		a.log.Info("sysctls in force", "set", need)
		a.sysctlsLogged = need
	}
	a.forgetVanishedDrains(actual)
	ops := Plan(desired, actual, a.owned, a.drainDone)
	ops = append(ops, planResets(desired, actual, resets)...)
	a.applied = applied
	a.logResets(desired, ops)
	a.trackDrains(ops)
	applyErr := a.opts.Kernel.Apply(ctx, ops, &a.owned)
	a.forgetResetConnections(ops)
	for _, vs := range desired.Services {
		a.owned.addService(vs.ServiceKey) // configured and now present: ours
	}
	a.logOps(ops)
	if applyErr != nil {
		a.log.Error("some changes failed; will retry", "err", applyErr)
	}
	a.publish(desired, start, applyErr, ops...)
	if len(ops) > 0 {
		if err := SaveOwnership(a.cfg.Agent.StateDir, a.owned); err != nil {
			a.log.Error("saving ownership record", "err", err)
		}
	}
	// Passes that change nothing stay quiet, except the first: after a
	// restart it says the kernel was adopted as it was.
	if len(ops) > 0 || !a.reconciled {
		a.reconciled = true
		a.log.Info("reconciled", "ops", len(ops), "changes", summarize(ops), "duration", a.opts.Now().Sub(start).String())
	}
	return ops
}

// announced narrows d's addresses to the VIPs this node holds (with the
// addresses that move with them: FULLNAT source addresses, NAT gateway).
func (a *Agent) announced(d Desired) Desired {
	if a.opts.VIPs == nil {
		return d
	}
	held := map[netip.Addr]bool{}
	for _, s := range a.cfg.Services {
		if a.opts.VIPs.Holds(s.VIP) {
			for _, addr := range s.Addresses() {
				held[addr] = true
			}
		}
	}
	d.Addresses = slices.DeleteFunc(slices.Clone(d.Addresses), func(p netip.Prefix) bool { return !held[p.Addr()] })
	return d
}

// sysctlNeeds lists the sysctls d requires, for the log.
func sysctlNeeds(d Desired) string {
	var set []string
	if d.ForwardV4 {
		set = append(set, "net.ipv4.ip_forward=1", "net.ipv4.conf.{all,"+d.Interface+"}.send_redirects=0")
	}
	if d.ForwardV6 {
		set = append(set, "net.ipv6.conf.all.forwarding=1")
	}
	if d.IPVSConntrack {
		set = append(set, "net.ipv4.vs.conntrack=1")
	}
	if d.ExpireConnections {
		set = append(set, "net.ipv4.vs.expire_nodest_conn=1", "net.ipv4.vs.expire_quiescent_template=1")
	}
	return strings.Join(set, " ")
}

// maxOpsLogged bounds the per-change log lines at info level: a cold start
// of thousands of objects is summarized (each op is still logged at debug).
const maxOpsLogged = 50

func (a *Agent) logOps(ops []Op) {
	level := slog.LevelInfo
	if len(ops) > maxOpsLogged {
		level = slog.LevelDebug
	}
	if !a.log.Enabled(context.Background(), level) {
		return
	}
	for _, op := range ops {
		a.log.Log(context.Background(), level, "applied", "op", op.Kind.String(), "object", op.String())
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

func (a *Agent) drainDone(svc ipvs.ServiceKey, dst ipvs.Destination) bool {
	if dst.ActiveConns+dst.InactiveConns == 0 {
		return true
	}
	started, ok := a.drains[drainKey{svc, dst.DestinationKey}]
	if !ok {
		// Found at weight 0 without a record (e.g. after a restart): start the clock now.
		a.drains[drainKey{svc, dst.DestinationKey}] = a.opts.Now()
		return false
	}
	return a.opts.Now().Sub(started) >= a.drainTimeout(svc)
}

// drainTimeout is the configured drain_timeout of the service that still
// wants svc, else the agent's default (the service left the configuration).
func (a *Agent) drainTimeout(svc ipvs.ServiceKey) time.Duration {
	for _, vs := range a.cfg.Desired.Services {
		if vs.ServiceKey == svc && vs.DrainTimeout > 0 {
			return vs.DrainTimeout
		}
	}
	return a.opts.DrainTimeout
}

// forgetVanishedDrains drops drain clocks of destinations no longer in the
// kernel (deleted by someone else), so they do not keep the fast check going.
func (a *Agent) forgetVanishedDrains(actual Actual) {
	for k := range a.drains {
		svc, ok := actual.Services[k.svc]
		if !ok || !slices.ContainsFunc(svc.Destinations, func(d ipvs.Destination) bool { return d.DestinationKey == k.dst }) {
			delete(a.drains, k)
		}
	}
}

func (a *Agent) trackDrains(ops []Op) {
	for _, op := range ops {
		k := drainKey{op.Service.ServiceKey, op.Destination.DestinationKey}
		switch {
		case op.Kind == UpdateDestination && op.Reason == "draining":
			a.drains[k] = a.opts.Now()
		case op.Kind == DeleteDestination, op.Kind == AddDestination,
			op.Kind == UpdateDestination && op.Destination.Weight > 0:
			delete(a.drains, k)
		case op.Kind == DeleteService:
			for dk := range a.drains {
				if dk.svc == op.Service.ServiceKey {
					delete(a.drains, dk)
				}
			}
		}
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
