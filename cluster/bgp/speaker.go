package bgp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/netip"
	"slices"
	"sync"
	"time"

	api "github.com/osrg/gobgp/v3/api"
	"github.com/osrg/gobgp/v3/pkg/server"

	"github.com/lvsd/lvsd/cluster/bfd"
	"github.com/lvsd/lvsd/cluster/internal/owner"
)

// Speaker announces routes to the routers with GoBGP embedded in the
// process (no gRPC listener): its announcements cannot outlive lvsd, since
// the kernel closes the BGP sessions when the process dies and the routers
// withdraw at once. One goroutine (run) owns the announced routes and the
// peers' state; GoBGP's and BFD's callbacks hand it events through the
// mutex-guarded fields below.
type Speaker struct {
	cfg    Config
	log    *slog.Logger
	srv    *server.BgpServer
	reqs   owner.Calls
	wake   chan struct{} // 1-buffered: events pending
	done   chan struct{}
	cancel context.CancelFunc
	unsub  func()

	mu         sync.Mutex // guards all following fields
	events     []peerEvent
	bfdChanges []bfd.Change
	reasons    map[netip.Addr]string // reason of the last "Peer Down" GoBGP logged
	downs      map[netip.Addr]int    // how many "Peer Down" GoBGP logged
	closed     bool

	st loopState // owned by run
}

var _ Announcer = (*Speaker)(nil)

// loopState is the Speaker's state, owned by the run goroutine.
type loopState struct {
	started time.Time
	peers   map[netip.Addr]*peerState
	routes  map[netip.Prefix]Route
	md5Base uint64
	// pendingPeers: restarting, the peers are not in GoBGP yet; they
	// are added with the first routes, or at restartDeadline (graceful.go).
	pendingPeers    bool
	restartDeadline time.Time
	openedAt        time.Time // when openPeersAfterRestart opened them
	// closingForRestart: CloseForRestart shut the sessions down; their
	// BFD sessions stay up until it takes them down (graceful.go).
	closingForRestart bool
}

// ErrClosed is returned by a closed Speaker.
var ErrClosed = errors.New("bgp: speaker closed")

// Start starts GoBGP with the configuration and its peers (and their BFD
// sessions). Sessions come up in the background; nothing is announced
// until SetRoutes.
func Start(ctx context.Context, cfg Config) (*Speaker, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	s := &Speaker{
		cfg: cfg, log: cfg.Log, reqs: make(owner.Calls), wake: make(chan struct{}, 1), done: make(chan struct{}),
		reasons: map[netip.Addr]string{}, downs: map[netip.Addr]int{},
		st: loopState{started: time.Now(), peers: map[netip.Addr]*peerState{}, routes: map[netip.Prefix]Route{}},
	}
	if cfg.Restarting && cfg.GracefulRestart.Enabled {
		s.st.pendingPeers, s.st.restartDeadline = true, restartOpenDeadline(s.st.started, cfg.GracefulRestart)
	}
	logger := &gobgpLogger{log: cfg.Log.With("component", "gobgp"), onPeerDown: s.recordReason}
	s.srv = server.NewBgpServer(server.LoggerOption(logger))
	go s.srv.Serve()
	if err := s.startBGP(ctx); err != nil {
		s.srv.Stop()
		return nil, err
	}
	loopCtx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	go s.run(loopCtx)
	s.log.Info("bgp speaker started", "asn", cfg.ASN, "router_id", cfg.RouterID, "peers", len(cfg.Peers),
		"listen_addresses", cfg.ListenAddresses, "listen_port", cfg.ListenPort,
		"graceful_restart", cfg.GracefulRestart.Enabled, "restarting", s.st.pendingPeers)
	if cfg.ListenPort != 0 && len(cfg.ListenAddresses) == 0 {
		s.log.Warn(fmt.Sprintf("the BGP speaker listens on port %d of every address: name this director's own addresses to listen on (bgp listen_addresses)",
			cfg.ListenPort), "listen_port", cfg.ListenPort)
	}
	return s, nil
}

func (s *Speaker) startBGP(ctx context.Context) error {
	err := s.srv.StartBgp(ctx, &api.StartBgpRequest{Global: apiGlobal(s.cfg)})
	if err != nil {
		return fmt.Errorf("bgp: starting: %w", err)
	}
	if err := s.installPolicy(ctx); err != nil {
		return err
	}
	// The watch lives as long as the server: GoBGP stops calling back
	// once the server stopped.
	if err := s.srv.WatchEvent(context.Background(), &api.WatchEventRequest{Peer: &api.WatchEventRequest_Peer{}},
		s.onWatch); err != nil {
		return fmt.Errorf("bgp: watching peers: %w", err)
	}
	if n, err := md5Failures(s.cfg.netstat); err == nil {
		s.st.md5Base = n
	} else {
		s.log.Debug("bgp: cannot read the kernel's TCP-MD5 counters", "err", err)
	}
	if s.cfg.BFD != nil {
		s.unsub = s.cfg.BFD.Subscribe(s.onBFD)
	}
	for _, p := range s.cfg.Peers {
		s.st.peers[p.Address] = &peerState{cfg: p, state: StateIdle, since: s.st.started, downSince: s.st.started}
		if s.st.pendingPeers {
			continue // openPeersAfterRestart adds them
		}
		if err := s.addPeer(ctx, p, false); err != nil {
			return err
		}
	}
	return nil
}

// addPeer adds p to GoBGP; restarting opens its session as the
// restarting speaker.
func (s *Speaker) addPeer(ctx context.Context, p PeerConfig, restarting bool) error {
	if err := s.srv.AddPeer(ctx, &api.AddPeerRequest{Peer: apiPeer(p, s.cfg.GracefulRestart, restarting)}); err != nil {
		return fmt.Errorf("bgp: adding peer %s: %w", p.Address, err)
	}
	s.log.Info("bgp peer added", "peer", p.Address, "peer_asn", p.ASN, "local", p.LocalAddress,
		"families", p.Families, "bfd", p.BFD, "md5", p.Password != "", "hold", p.HoldTime.String(),
		"max_prefixes", p.MaxPrefixes, "graceful_restart", s.cfg.GracefulRestart.Enabled, "restarting", restarting)
	return nil
}

// apiGlobal is GoBGP's global configuration. GoBGP accepts a session on
// its listeners only from a configured peer (it has no dynamic neighbours
// here), and only on the peer's local address when one is set.
func apiGlobal(c Config) *api.Global {
	g := &api.Global{Asn: c.ASN, RouterId: c.RouterID.String(), ListenPort: -1} // -1: no listener
	if c.ListenPort != 0 {
		g.ListenPort = int32(c.ListenPort)
		for _, a := range c.ListenAddresses { // none: GoBGP's 0.0.0.0 and ::
			g.ListenAddresses = append(g.ListenAddresses, a.String())
		}
	}
	return g
}

func apiPeer(p PeerConfig, gr GracefulRestart, restarting bool) *api.Peer {
	secs := func(d time.Duration) uint64 { return uint64(d / time.Second) }
	peer := &api.Peer{
		Conf: &api.PeerConf{NeighborAddress: p.Address.String(), PeerAsn: p.ASN, AuthPassword: p.Password},
		Timers: &api.Timers{Config: &api.TimersConfig{ConnectRetry: secs(p.ConnectRetry),
			HoldTime: secs(p.HoldTime), KeepaliveInterval: secs(p.KeepaliveInterval),
			// After a BFD hold-down (ResetPeer, see bfdEvent) GoBGP
			// waits this long before it dials again; its default is 30 s.
			IdleHoldTimeAfterReset: secs(idleHoldAfterBFD)}},
		Transport:       &api.Transport{RemotePort: uint32(p.Port), BindInterface: p.Interface},
		GracefulRestart: apiGracefulRestart(gr, restarting),
	}
	if p.LocalAddress.IsValid() {
		peer.Transport.LocalAddress = p.LocalAddress.String()
	}
	for _, f := range p.Families {
		af := &api.AfiSafi{Config: &api.AfiSafiConfig{Family: apiFamily(f), Enabled: true}, PrefixLimits: prefixLimits(p, f)}
		if gr.Enabled {
			af.MpGracefulRestart = &api.MpGracefulRestart{Config: &api.MpGracefulRestartConfig{Enabled: true}}
		}
		peer.AfiSafis = append(peer.AfiSafis, af)
	}
	return peer
}

func (s *Speaker) run(ctx context.Context) {
	defer close(s.done)
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case f := <-s.reqs:
			f()
		case <-s.wake:
			s.handleEvents()
		case now := <-tick.C:
			s.housekeep(now)
		}
	}
}

// do runs f on the run goroutine and waits for it.
func (s *Speaker) do(ctx context.Context, f func() error) error {
	return s.reqs.Do(ctx, s.done, ErrClosed, f)
}

// SetRoutes announces exactly routes (see Announcer). An invalid set
// changes nothing; a GoBGP error on one route leaves the others applied
// and is returned.
func (s *Speaker) SetRoutes(ctx context.Context, routes []Route) error {
	return s.do(ctx, func() error { return s.applyRoutes(ctx, routes) })
}

func (s *Speaker) applyRoutes(ctx context.Context, routes []Route) error {
	want, err := validateRoutes(s.cfg, routes)
	if err != nil {
		return err
	}
	var errs []error
	for _, p := range slices.SortedFunc(maps.Keys(s.st.routes), netip.Prefix.Compare) {
		if _, keep := want[p]; keep {
			continue
		}
		if err := s.deletePath(ctx, s.st.routes[p]); err != nil {
			errs = append(errs, err)
			continue
		}
		delete(s.st.routes, p)
		s.log.Info("bgp route withdrawn", "prefix", p)
	}
	for _, p := range slices.SortedFunc(maps.Keys(want), netip.Prefix.Compare) {
		r := want[p]
		if old, ok := s.st.routes[p]; ok && old.Equal(r) {
			continue
		}
		path, err := apiPath(s.cfg, r)
		if err == nil {
			_, err = s.srv.AddPath(ctx, &api.AddPathRequest{TableType: api.TableType_GLOBAL, Path: path})
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("bgp: announcing %s: %w", p, err))
			continue
		}
		s.st.routes[p] = r
		s.log.Info("bgp route announced", "route", r.String())
	}
	if s.st.pendingPeers && len(s.st.routes) > 0 {
		s.openPeersAfterRestart(ctx, whyRoutesIn)
	}
	return errors.Join(errs...)
}

func (s *Speaker) deletePath(ctx context.Context, r Route) error {
	path, err := apiPath(s.cfg, r)
	if err == nil {
		err = s.srv.DeletePath(ctx, &api.DeletePathRequest{TableType: api.TableType_GLOBAL,
			Family: path.Family, Path: path})
	}
	if err != nil {
		return fmt.Errorf("bgp: withdrawing %s: %w", r.Prefix, err)
	}
	return nil
}

// Withdraw withdraws everything and waits until each established session
// that carried a withdrawn route has written an UPDATE since (GoBGP sends
// withdrawals at once: it has no advertisement interval).
func (s *Speaker) Withdraw(ctx context.Context) error {
	var before map[netip.Addr]uint64
	err := s.do(ctx, func() error {
		if len(s.st.routes) == 0 {
			return nil
		}
		families := map[Family]bool{}
		for p := range s.st.routes {
			families[familyOf(p.Addr())] = true
		}
		sent, err := s.sentUpdates(ctx)
		if err != nil {
			return err
		}
		before = map[netip.Addr]uint64{}
		for addr, n := range sent {
			if p := s.st.peers[addr]; p != nil && (p.cfg.carries(IPv4Unicast) && families[IPv4Unicast] ||
				p.cfg.carries(IPv6Unicast) && families[IPv6Unicast]) {
				before[addr] = n
			}
		}
		return s.applyRoutes(ctx, nil)
	})
	if err != nil || len(before) == 0 {
		return err
	}
	for {
		now, err := s.sentUpdates(ctx)
		if err != nil {
			return err
		}
		pending := 0
		for addr, n := range before {
			if m, ok := now[addr]; ok && m <= n {
				pending++
			}
		}
		if pending == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("bgp: withdrawals not yet written to %d sessions: %w", pending, ctx.Err())
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// sentUpdates returns, per established session, the UPDATE messages
// GoBGP has written to its socket.
func (s *Speaker) sentUpdates(ctx context.Context) (map[netip.Addr]uint64, error) {
	out := map[netip.Addr]uint64{}
	err := s.srv.ListPeer(ctx, &api.ListPeerRequest{}, func(p *api.Peer) {
		st := p.GetState()
		addr, err := netip.ParseAddr(st.GetNeighborAddress())
		if err == nil && st.GetSessionState() == api.PeerState_ESTABLISHED {
			out[addr.Unmap()] = st.GetMessages().GetSent().GetUpdate()
		}
	})
	return out, err
}

// deletePeers closes every session with a Cease (peer de-configured) and
// waits, bounded by ctx and deletedWait, until GoBGP logged "Peer Down" for
// each established one. GoBGP v3.37.0's StopBgp clears the global
// configuration that the sessions' goroutines read, without waiting for
// them (a data race the race detector reports); a session's goroutine logs
// "Peer Down" only after its reader has ended, and the logger hands that to
// us under s.mu, so StopBgp after it is ordered after the reads.
func (s *Speaker) deletePeers(ctx context.Context) error {
	before := map[netip.Addr]int{}
	err := s.do(ctx, func() error {
		if s.st.pendingPeers {
			return nil // none in GoBGP
		}
		var errs []error
		for addr, p := range s.st.peers {
			if p.state == StateEstablished {
				s.mu.Lock()
				before[addr] = s.downs[addr]
				s.mu.Unlock()
			}
			errs = append(errs, s.srv.DeletePeer(ctx, &api.DeletePeerRequest{Address: addr.String()}))
		}
		return errors.Join(errs...)
	})
	if err != nil {
		return err
	}
	return s.waitDown(ctx, before)
}

// waitDown waits, bounded by ctx and deletedWait, until GoBGP logged
// "Peer Down" for each peer of before (their count of downs then).
func (s *Speaker) waitDown(ctx context.Context, before map[netip.Addr]int) error {
	deadline := time.Now().Add(deletedWait)
	for len(before) > 0 && time.Now().Before(deadline) {
		s.mu.Lock()
		maps.DeleteFunc(before, func(a netip.Addr, n int) bool { return s.downs[a] > n })
		s.mu.Unlock()
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
	if len(before) > 0 {
		s.log.Debug("bgp: closed sessions not reported down in time", "peers", slices.Collect(maps.Keys(before)))
	}
	return nil
}

// deletedWait bounds how long Close waits for deleted sessions to end.
const deletedWait = 2 * time.Second

// Close withdraws every route (waiting as Withdraw does, bounded by ctx),
// closes the BGP sessions with a Cease notification (peer de-configured), takes the BFD
// sessions administratively down and stops GoBGP.
func (s *Speaker) Close(ctx context.Context) error { return s.close(ctx, false) }

// close is Close, or with forRestart CloseForRestart's: the routes stay,
// the sessions end without a NOTIFICATION, BFD goes AdminDown after them.
func (s *Speaker) close(ctx context.Context, forRestart bool) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.mu.Unlock()
	start := time.Now()
	var errs []error
	if !forRestart {
		errs = append(errs, s.Withdraw(ctx))
	}
	withdrawn := time.Since(start)
	if s.unsub != nil {
		s.unsub() // BFD going down now must not re-enable anything
	}
	if forRestart {
		errs = append(errs, s.abortSessions(ctx))
	} else {
		errs = append(errs, s.deletePeers(ctx))
	}
	s.cancel()
	<-s.done
	// Closes the listeners; the peers are gone already (restarting: their
	// sessions are, and the Cease it sends has no socket to go out on).
	errs = append(errs, s.srv.StopBgp(context.Background(), &api.StopBgpRequest{}))
	if forRestart {
		select {
		case <-ctx.Done():
		case <-time.After(bfdAfterAbort):
		}
	}
	for _, p := range s.st.peers { // the loop has ended: its state is ours now
		if p.bfdRunning {
			errs = append(errs, s.cfg.BFD.RemovePeer(ctx, p.cfg.Address))
		}
	}
	s.srv.Stop()
	s.log.Info("bgp speaker stopped", "withdrawn_after", withdrawn.Round(time.Millisecond).String(),
		"stopped_after", time.Since(start).Round(time.Millisecond).String(), "for_restart", forRestart)
	return errors.Join(errs...)
}
