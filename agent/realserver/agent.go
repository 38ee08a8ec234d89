package realserver

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lvsd/lvsd/agent/api"
	"github.com/lvsd/lvsd/agent/config"
	"github.com/lvsd/lvsd/agent/metrics"
	"github.com/lvsd/lvsd/agent/planner"
)

// Defaults of the real-server agent.
const (
	// DefaultCheck is how often the agent file is checked for edits.
	DefaultCheck = 2 * time.Second
	// DefaultResync is how often lo and the sysctls are read back and
	// corrected; a pass costs one address dump and a dozen small reads.
	DefaultResync = 10 * time.Second
)

// Options configure an Agent.
type Options struct {
	ConfigPath string
	Config     *config.Agent // already loaded from ConfigPath; nil: Run loads it
	Host       Host
	VIPs       VIPSource // nil: StaticVIPs
	Log        *slog.Logger
	Check      time.Duration
	Resync     time.Duration
	// Dial runs the local checks; nil: a net.Dialer.
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	Now  func() time.Time
	// Metrics is where /metrics is served (metrics.Listen); nil: not at
	// all. Version labels lvsd_build_info.
	Metrics net.Listener
	Version string
	// ReadOnlyAPI is the read-only socket (api.ListenGroup), served with
	// what reads of the API only; nil: none.
	ReadOnlyAPI net.Listener
}

// Agent keeps a real server's VIPs and sysctls in step with the agent file
// and serves its weight endpoint and API handlers. Its state is owned by
// the goroutine running Run; the handlers only read the published Status
// and send drain requests to Run.
type Agent struct {
	opts Options
	log  *slog.Logger

	// Owned by the goroutine running Run.
	cfg           *config.Agent
	fingerprint   [32]byte
	rec           Record
	missingLogged string
	loaded        configLoad // the last attempt to load the agent file

	status   atomic.Pointer[Status]     // published by Run, read by the handlers
	requests chan drainRequest          // from the API handlers to Run
	reloads  chan chan api.ReloadResult // likewise, reload requests
	passErr  error                      // the last reconcile's failure, for a reload request
	stopping chan struct{}              // closed when Run stops taking requests
	probes   probes                     // counted by the weight endpoint (metrics.go)
	toa      toaState                   // owned by Run (toa.go)
}

type drainRequest struct {
	drain bool
	reply chan error
}

// New returns an agent; Run starts it.
func New(opts Options) *Agent {
	if opts.Check <= 0 {
		opts.Check = DefaultCheck
	}
	if opts.Resync <= 0 {
		opts.Resync = DefaultResync
	}
	if opts.VIPs == nil {
		opts.VIPs = StaticVIPs
	}
	if opts.Dial == nil {
		var d net.Dialer
		opts.Dial = d.DialContext
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Log == nil {
		opts.Log = slog.Default()
	}
	return &Agent{opts: opts, log: opts.Log, requests: make(chan drainRequest),
		reloads: make(chan chan api.ReloadResult), stopping: make(chan struct{})}
}

// Run loads the record, serves the API on apiL and the weight endpoint on
// healthL (either may be nil), and reconciles until ctx ends: at once, on
// every value from reload (SIGHUP), when the agent file changes (checked
// every Check) and every Resync to correct drift. A configuration that
// fails to load at a reload is logged and the last good one stays.
// Stopping leaves the VIPs and sysctls in place: a restart must not drop
// traffic (`lvsd cleanup` removes them).
func (a *Agent) Run(ctx context.Context, reload <-chan os.Signal, apiL, healthL net.Listener) error {
	if err := a.start(); err != nil {
		return err
	}
	srvCtx, stopServers := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() {
		close(a.stopping)
		stopServers()
		wg.Wait()
	}()
	a.serve(&wg, "api", apiL, func() error { return api.Serve(srvCtx, apiL, a.APIHandler()) })
	a.serve(&wg, "read-only api", a.opts.ReadOnlyAPI, func() error {
		return api.Serve(srvCtx, a.opts.ReadOnlyAPI, api.ReadOnly(a.APIHandler()))
	})
	a.serve(&wg, "health", healthL, func() error { return serveEndpoint(srvCtx, healthL, a.HealthHandler()) })
	a.serve(&wg, "metrics", a.opts.Metrics, func() error {
		metrics.Serve(srvCtx, a.opts.Metrics, a.log, NewCollector(a, a.opts.Version))
		return nil
	})

	a.reconcile(ctx)
	st := a.status.Load()
	a.log.Info("ready", "vips", len(st.VIPs), "tunnel_vips", len(st.TunnelVIPs), "missing_vips", len(st.MissingVIPs),
		"down_tunnels", len(st.DownTunnels), "weight", st.Weight)
	lastFull, pending := a.opts.Now(), a.fingerprint
	tick := time.NewTicker(a.opts.Check)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			a.log.Info("stopping; VIPs and sysctls left in place (lvsd cleanup removes them)")
			return nil
		case req := <-a.requests:
			req.reply <- a.setDrained(req.drain)
			continue
		case reply := <-a.reloads:
			reply <- a.reloadAndApply(ctx)
			lastFull = a.opts.Now()
			continue
		case <-reload:
			a.reload("signal")
		case <-tick.C:
			if a.editToReload(&pending) {
				a.reload("file change")
			} else if a.opts.Now().Sub(lastFull) < a.opts.Resync {
				continue
			}
		}
		a.reconcile(ctx)
		lastFull = a.opts.Now()
	}
}

// editToReload reports whether an edit of the files is to be reloaded now:
// never with reload.watch: false (only a reload request reads the files),
// else once it settled (settledEdit).
func (a *Agent) editToReload(pending *[32]byte) bool {
	return a.cfg.WatchFiles && a.settledEdit(pending)
}

// settledEdit reports whether the files changed since they were loaded
// and stayed the same for a whole tick since pending, their fingerprint at
// the tick before: an editor's truncate-then-write must not be read half
// way.
func (a *Agent) settledEdit(pending *[32]byte) bool {
	fp := a.configFingerprint()
	settled := fp == *pending
	*pending = fp
	return fp != a.fingerprint && settled
}

// start loads the configuration and the record of what lvsd added.
func (a *Agent) start() error {
	cfg := a.opts.Config
	if cfg == nil {
		var err error
		if cfg, err = config.LoadAgent(a.opts.ConfigPath); err != nil {
			return err
		}
	}
	if cfg.Role != config.RoleRealServer {
		return fmt.Errorf("%s: role is %s, not realserver", a.opts.ConfigPath, cfg.Role)
	}
	a.setConfig(cfg)
	a.loaded = configLoad{At: a.opts.Now(), LastGood: a.opts.Now()}
	var err error
	if a.rec, err = LoadRecord(cfg.StateDir); err != nil {
		return fmt.Errorf("reading the real-server record: %w", err)
	}
	vips := a.opts.VIPs(cfg)
	// Until the first pass has put them on lo, the endpoint must not call
	// this server healthy: traffic sent now would be dropped.
	a.publish(append(vips, a.cfg.RealServer.Tunnel.VIPs...), nil)
	tunnelVIPs := cfg.RealServer.Tunnel.VIPs
	a.log.Info("starting", "config", a.opts.ConfigPath, "vips", len(vips), "tunnel_vips", len(tunnelVIPs),
		"owned_addresses", len(a.rec.Addresses), "owned_sysctls", len(a.rec.Sysctls), "owned_links", len(a.rec.Links),
		"drained", a.rec.Drained)
	if len(vips)+len(tunnelVIPs) == 0 {
		a.log.Warn("no VIPs configured (realserver.vips, realserver.tunnel.vips): only the ARP sysctls are managed")
	}
	return nil
}

// serve runs serve (which answers on l) on wg, unless there is no l.
func (a *Agent) serve(wg *sync.WaitGroup, name string, l net.Listener, serve func() error) {
	if l == nil {
		return
	}
	wg.Go(func() {
		if err := serve(); err != nil {
			a.log.Error("server stopped", "server", name, "err", err)
		}
	})
	a.log.Info("serving", "server", name, "address", l.Addr().String())
}

func (a *Agent) setConfig(cfg *config.Agent) {
	a.cfg = cfg
	a.fingerprint = a.configFingerprint()
}

// reload reads the agent file again; a rejected one leaves the last good
// one in force and is returned.
func (a *Agent) reload(why string) error {
	cfg, err := config.LoadAgent(a.opts.ConfigPath)
	if err == nil && cfg.Role != config.RoleRealServer {
		err = fmt.Errorf("role changed to %s: restart lvsd to change roles", cfg.Role)
	}
	a.loaded.At, a.loaded.Err = a.opts.Now(), ""
	if err != nil {
		// Remember the broken file's fingerprint so the error is logged
		// once, not at every tick; the last good configuration stays.
		a.fingerprint = a.configFingerprint()
		a.log.Error("configuration rejected; keeping the last good one", "trigger", why, "err", err)
		a.loaded.Err = err.Error()
		a.republish()
		return err
	}
	a.loaded.LastGood = a.loaded.At
	old := a.cfg
	a.setConfig(cfg)
	if cfg.APISocket != old.APISocket || cfg.RealServer.Health.Listen != old.RealServer.Health.Listen {
		a.log.Warn("api.socket or realserver.health.listen changed: restart lvsd to move them",
			"api_socket", old.APISocket, "health_listen", old.RealServer.Health.Listen)
	}
	a.log.Info("configuration reloaded", "trigger", why, "vips", len(a.opts.VIPs(cfg)), "weight", cfg.RealServer.Weight)
	a.republish()
	return nil
}

// reconcile brings the host to the desired state once and returns the ops
// it applied. Failures are logged and retried at the next pass.
func (a *Agent) reconcile(ctx context.Context) []planner.Op {
	start := a.opts.Now()
	a.passErr = nil
	d, err := planner.BuildRealServer(a.cfg.RealServer, a.opts.VIPs(a.cfg))
	if err != nil {
		a.log.Error("computing the desired state", "err", err)
		a.passErr = err
		return nil
	}
	var all []planner.Op
	// One round applies the plan; a read after it tells the endpoint what
	// is in place. A device that did not exist had its sysctls unread and
	// could not come up: a second round does that at once.
	rounds := 1
	for round := 1; ; round++ {
		actual, missing, err := a.opts.Host.ReadActual(ctx, d, a.rec.Ownership)
		if err != nil {
			a.log.Error("reading host state", "err", err)
			a.passErr = err
			return all
		}
		ops := planner.PlanRealServer(d, actual, a.rec.Ownership)
		if len(ops) == 0 || round > rounds {
			a.logMissing(missing)
			a.publishState(d, actual)
			break
		}
		applyErr := a.opts.Host.Apply(ctx, ops, &a.rec, a.save)
		for _, op := range ops {
			a.log.Info("applied", "op", op.Kind.String(), "object", op.Describe(), "reason", op.Reason)
		}
		if applyErr != nil {
			a.log.Error("some changes failed; will retry", "err", applyErr)
			a.passErr = applyErr
		}
		all = append(all, ops...)
		if round == 1 && slices.ContainsFunc(ops, func(o planner.Op) bool { return o.Kind == planner.CreateLink }) {
			rounds = 2
		}
	}
	if err := a.reconcileTOA(ctx); err != nil {
		a.log.Error("some changes failed; will retry", "err", err)
		a.passErr = errors.Join(a.passErr, err)
	}
	a.republish()
	if len(all) > 0 {
		a.log.Info("reconciled", "ops", len(all), "duration", a.opts.Now().Sub(start).String())
	} else {
		a.log.Debug("in step", "duration", a.opts.Now().Sub(start).String())
	}
	return all
}

// publishState publishes what the weight endpoint needs of the host: the
// configured VIPs not on lo, and the tunnel devices not up and GUE ports
// not open that the tunnel VIPs need.
func (a *Agent) publishState(d planner.RealServerDesired, actual planner.RealServerActual) {
	var notHeld []netip.Addr
	for _, p := range d.Addresses {
		if !planner.Holds(actual.Loopback, p.Addr()) {
			notHeld = append(notHeld, p.Addr())
		}
	}
	var down []string
	for _, l := range d.Tunnel.Links {
		if !actual.Links[l.Name].Up {
			down = append(down, l.Name+" is not up")
		}
	}
	for _, p := range d.Tunnel.FouPorts {
		if !slices.Contains(actual.FouPorts, p) {
			down = append(down, p.String()+" is not open")
		}
	}
	a.publish(notHeld, down)
}

// logMissing says which keys the host lacks, once per distinct set.
func (a *Agent) logMissing(keys []string) {
	s := strings.Join(keys, " ")
	if s == a.missingLogged {
		return
	}
	a.missingLogged = s
	if s == "" {
		a.log.Info("all sysctls present again")
		return
	}
	a.log.Warn("sysctls missing (interface absent?); they are set once it appears", "keys", s)
}

func (a *Agent) save(r Record) error { return SaveRecord(a.cfg.StateDir, r) }

// setDrained switches the drain state, persisting it before it shows.
func (a *Agent) setDrained(drain bool) error {
	if a.rec.Drained == drain {
		return nil
	}
	next := a.rec
	next.Drained, next.DrainedAt = drain, time.Time{}
	if drain {
		next.DrainedAt = a.opts.Now().UTC()
	}
	if err := a.save(next); err != nil {
		return fmt.Errorf("recording the drain state (unchanged): %w", err)
	}
	a.rec = next
	a.republish()
	st := a.status.Load()
	if drain {
		a.log.Info("drained: the weight endpoint announces 0", "configured_weight", st.ConfiguredWeight)
	} else {
		a.log.Info("undrained", "weight", st.Weight)
	}
	return nil
}

// request hands a drain or undrain to Run and waits for its answer.
func (a *Agent) request(ctx context.Context, drain bool) error {
	reply := make(chan error, 1)
	err, handErr := handOff(ctx, a, a.requests, drainRequest{drain: drain, reply: reply}, reply)
	if handErr != nil {
		return handErr
	}
	return err
}

// errStopping answers a request that reached an agent no longer running.
var errStopping = errors.New("the agent is stopping")

// handOff sends req to Run on requests and waits for its answer on reply;
// the error says why there is none (the agent stopped, ctx ended).
func handOff[Q, R any](ctx context.Context, a *Agent, requests chan<- Q, req Q, reply <-chan R) (R, error) {
	var none R
	select {
	case requests <- req:
	case <-a.stopping:
		return none, errStopping
	case <-ctx.Done():
		return none, ctx.Err()
	}
	select {
	case r := <-reply:
		return r, nil
	case <-ctx.Done():
		return none, ctx.Err()
	}
}

// configFingerprint hashes the agent file's size and modification time.
func (a *Agent) configFingerprint() [32]byte {
	h := sha256.New()
	if fi, err := os.Stat(a.opts.ConfigPath); err == nil {
		fmt.Fprintf(h, "%d %d\n", fi.Size(), fi.ModTime().UnixNano())
	}
	var sum [32]byte
	copy(sum[:], h.Sum(nil))
	return sum
}

// Status is what the agent publishes for its handlers and `lvsd drain`.
type Status struct {
	Schema           int            `json:"schema"` // api.SchemaVersion
	Node             string         `json:"node"`
	Drained          bool           `json:"drained"`
	DrainedAt        time.Time      `json:"drained_at,omitzero"`
	ConfiguredWeight int            `json:"configured_weight"`
	Weight           int            `json:"weight"` // what the endpoint announces: 0 while drained
	VIPs             []netip.Addr   `json:"vips"`
	TunnelVIPs       []netip.Addr   `json:"tunnel_vips,omitempty"`
	MissingVIPs      []netip.Addr   `json:"missing_vips,omitempty"` // configured but not on lo
	DownTunnels      []string       `json:"down_tunnels,omitempty"` // what the tunnel VIPs need that is not in place: "tunl0 is not up"
	OwnedAddresses   []netip.Prefix `json:"owned_addresses"`
	OwnedSysctls     []OwnedSysctl  `json:"owned_sysctls"`
	HealthListen     string         `json:"health_listen,omitempty"`
	HealthPath       string         `json:"health_path,omitempty"`
	Checks           []CheckResult  `json:"checks,omitempty"` // filled per request
	// ConfigLoadedAt is when the agent file in force was loaded;
	// ConfigError says why the last attempt since was rejected.
	ConfigLoadedAt time.Time `json:"config_loaded_at"`
	ConfigError    string    `json:"config_error,omitempty"`

	// TOA is realserver.client_address; nil without it.
	TOA *TOAStatus `json:"toa,omitempty"`

	checks []config.LocalCheck
	toa    toaState
}

// republish publishes the last host state again with a new configuration
// or drain state.
func (a *Agent) republish() {
	st := a.status.Load()
	a.publish(st.MissingVIPs, st.DownTunnels)
}

// publish makes the current state visible to the handlers.
func (a *Agent) publish(missing []netip.Addr, down []string) {
	rs := a.cfg.RealServer
	st := &Status{
		Schema:           api.SchemaVersion,
		Node:             a.cfg.Node,
		Drained:          a.rec.Drained,
		DrainedAt:        a.rec.DrainedAt,
		ConfiguredWeight: rs.Weight,
		Weight:           rs.Weight,
		VIPs:             slices.Clone(a.opts.VIPs(a.cfg)),
		TunnelVIPs:       slices.Clone(rs.Tunnel.VIPs),
		MissingVIPs:      slices.Clone(missing),
		DownTunnels:      slices.Clone(down),
		OwnedAddresses:   ownedPrefixes(a.rec.Addresses),
		OwnedSysctls:     slices.Clone(a.rec.Sysctls),
		HealthListen:     rs.Health.Listen,
		HealthPath:       rs.Health.Path,
		ConfigLoadedAt:   a.loaded.LastGood,
		ConfigError:      a.loaded.Err,
		checks:           slices.Clone(rs.Health.Checks),
		toa:              a.toa,
	}
	if !a.toa.applied && a.toa.err == nil {
		st.toa.cfg = rs.TOA // before the first pass: what it will set up
	}
	if st.Drained {
		st.Weight = 0
	}
	a.status.Store(st)
}

// ownedPrefixes are the prefixes of addrs, as the status shows them (all on
// lo).
func ownedPrefixes(addrs []planner.OwnedAddress) []netip.Prefix {
	var out []netip.Prefix
	for _, o := range addrs {
		out = append(out, o.Prefix)
	}
	return out
}
