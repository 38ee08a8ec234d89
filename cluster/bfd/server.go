package bfd

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/netip"
	"slices"
	"time"

	"github.com/lvsd/lvsd/cluster/internal/owner"
)

// Config configures a Server.
type Config struct {
	// Timers are the defaults of every peer (zero fields: 100 ms × 3).
	Timers Timers
	Log    *slog.Logger
	// Transport replaces the UDP sockets (tests); nil means UDP on port
	// 3784 (RFC 5881), which needs Linux and CAP_NET_BIND_SERVICE.
	Transport Transport
}

// PeerConfig is one single-hop session (RFC 5881).
type PeerConfig struct {
	// Peer is the neighbour's address on the shared link.
	Peer netip.Addr
	// Local is our address on that link. Routers match a session by
	// both addresses, so it must be the address the BGP session uses;
	// zero lets the kernel pick the source.
	Local netip.Addr
	// Interface binds the session to a device; needed for link-local
	// IPv6 neighbours, optional otherwise.
	Interface string
	// Timers override the Server's defaults field by field.
	Timers Timers
}

// Change reports that a session changed state.
type Change struct {
	Peer        netip.Addr
	Old, State  State
	Diag        Diag  // ours: why it went down
	RemoteState State // AdminDown here means the neighbour went down on purpose
	At          time.Time
}

// PeerStatus is one session for status output.
type PeerStatus struct {
	Peer, Local netip.Addr
	Interface   string
	SessionStatus
}

// Stats counts what the Server dropped, for status and metrics.
type Stats struct {
	Received, Sent       uint64
	Malformed, NoSession uint64
	WrongSource          uint64 // a known discriminator from another address
	BadTTL               uint64 // TTL or hop limit below 255: not from a neighbour (RFC 5881 §5)
	SendErrors           uint64
}

// Server runs BFD sessions: one goroutine owns them all, receives on the
// transport, sends, runs the timers and tells subscribers about state
// changes. Methods are safe for concurrent use.
type Server struct {
	cfg  Config
	log  *slog.Logger
	tr   Transport
	reqs owner.Calls
	done chan struct{}
	stop context.CancelFunc
	subs subscribers
	l    *loop // touched only through reqs, on the loop goroutine
}

// ErrClosed is returned by methods of a closed Server.
var ErrClosed = errors.New("bfd: server closed")

// Start starts the server's goroutine. Close stops it.
func Start(cfg Config) (*Server, error) {
	cfg.Timers = cfg.Timers.WithDefaults()
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	tr := cfg.Transport
	if tr == nil {
		var err error
		if tr, err = newUDPTransport(cfg.Log); err != nil {
			return nil, err
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &Server{cfg: cfg, log: cfg.Log, tr: tr, reqs: make(owner.Calls), done: make(chan struct{}), stop: cancel}
	s.l = &loop{s: s, byPeer: map[netip.Addr]*peer{}, byDiscr: map[uint32]*peer{}}
	go s.l.run(ctx)
	return s, nil
}

// do runs f on the loop goroutine and waits for it.
func (s *Server) do(ctx context.Context, f func(*loop) error) error {
	return s.reqs.Do(ctx, s.done, ErrClosed, func() error { return f(s.l) })
}

// AddPeer starts a session with p.Peer, or updates its timers when it
// exists. The session starts Down and comes Up once the neighbour answers.
func (s *Server) AddPeer(ctx context.Context, p PeerConfig) error {
	if !p.Peer.IsValid() {
		return errors.New("bfd: peer address missing")
	}
	p.Peer, p.Local = p.Peer.Unmap(), p.Local.Unmap()
	if p.Local.IsValid() && p.Local.Is4() != p.Peer.Is4() {
		return fmt.Errorf("bfd: peer %s and local address %s differ in family", p.Peer, p.Local)
	}
	if p.Peer.Is6() && p.Peer.IsLinkLocalUnicast() && p.Interface == "" {
		return fmt.Errorf("bfd: link-local peer %s needs an interface", p.Peer)
	}
	return s.do(ctx, func(l *loop) error { return l.add(p) })
}

// RemovePeer tells the neighbour the session goes administratively down
// and removes it. Removing an unknown peer is not an error.
func (s *Server) RemovePeer(ctx context.Context, addr netip.Addr) error {
	return s.do(ctx, func(l *loop) error { l.remove(addr.Unmap()); return nil })
}

// Peers returns the sessions, sorted by peer address.
func (s *Server) Peers(ctx context.Context) ([]PeerStatus, error) {
	var out []PeerStatus
	err := s.do(ctx, func(l *loop) error {
		for _, p := range l.byPeer {
			out = append(out, PeerStatus{Peer: p.cfg.Peer, Local: p.cfg.Local, Interface: p.cfg.Interface,
				SessionStatus: p.sess.Status()})
		}
		return nil
	})
	slices.SortFunc(out, func(a, b PeerStatus) int { return a.Peer.Compare(b.Peer) })
	return out, err
}

// Stats returns the counters.
func (s *Server) Stats(ctx context.Context) (Stats, error) {
	var st Stats
	err := s.do(ctx, func(l *loop) error { st = l.stats; return nil })
	return st, err
}

// Subscribe calls fn for every state change of every session, on the
// server's goroutine: fn must return quickly and must not call the Server.
// The returned function unsubscribes.
func (s *Server) Subscribe(fn func(Change)) (cancel func()) { return s.subs.add(fn) }

// Close takes every session administratively down, so neighbours do not
// count the stop as a failure (RFC 5882 §3.2), waits until each neighbour
// answered Down or a detection time passed (bounded by ctx), and stops.
func (s *Server) Close(ctx context.Context) error {
	err := s.do(ctx, func(l *loop) error { l.stopping = true; return nil })
	if errors.Is(err, ErrClosed) {
		return nil
	}
	if err != nil {
		s.stop()
	}
	select {
	case <-s.done:
	case <-ctx.Done():
		s.stop()
		<-s.done
	}
	return nil
}

// peer is one session and its socket; owned by the loop.
type peer struct {
	cfg  PeerConfig
	sess *Session
	conn Conn
	buf  []byte
}

// loop is the state of the server's goroutine.
type loop struct {
	s        *Server
	byPeer   map[netip.Addr]*peer
	byDiscr  map[uint32]*peer
	stats    Stats
	stopping bool
	stopBy   time.Time // when stopping gives up waiting for the neighbours
}

func (l *loop) run(ctx context.Context) {
	defer close(l.s.done)
	defer l.s.tr.Close()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			l.closeAll()
			return
		case d := <-l.s.tr.Packets():
			l.receive(d)
		case f := <-l.s.reqs:
			f()
		case <-timer.C:
		}
		// Packets that arrived while this goroutine waited to run count
		// before the timers do: after a scheduling stall, the timer and the
		// packets that would have reset it are ready at once, and select
		// picks either.
		l.drainPackets()
		now := time.Now()
		if l.stopping && l.stopStep(now) {
			l.closeAll()
			return
		}
		wait := l.advance(now)
		timer.Reset(wait)
	}
}

func (l *loop) drainPackets() {
	for {
		select {
		case d := <-l.s.tr.Packets():
			l.receive(d)
		default:
			return
		}
	}
}

func (l *loop) add(p PeerConfig) error {
	timers := p.Timers
	if timers.DesiredMinTx == 0 {
		timers.DesiredMinTx = l.s.cfg.Timers.DesiredMinTx
	}
	if timers.RequiredMinRx == 0 {
		timers.RequiredMinRx = l.s.cfg.Timers.RequiredMinRx
	}
	if timers.DetectMult == 0 {
		timers.DetectMult = l.s.cfg.Timers.DetectMult
	}
	if old := l.byPeer[p.Peer]; old != nil {
		if old.cfg.Local == p.Local && old.cfg.Interface == p.Interface {
			old.cfg.Timers = timers
			old.sess.SetTimers(timers)
			return nil
		}
		l.remove(p.Peer)
	}
	conn, err := l.s.tr.Open(p.Local, p.Peer, p.Interface)
	if err != nil {
		return fmt.Errorf("bfd: session with %s: %w", p.Peer, err)
	}
	discr := l.newDiscriminator()
	p.Timers = timers
	pr := &peer{cfg: p, conn: conn, sess: NewSession(discr, timers, time.Now(), rand.Float64)}
	l.byPeer[p.Peer], l.byDiscr[discr] = pr, pr
	l.s.log.Info("bfd session added", "peer", p.Peer, "local", p.Local, "interface", p.Interface,
		"tx", timers.DesiredMinTx.String(), "rx", timers.RequiredMinRx.String(), "multiplier", timers.DetectMult)
	return nil
}

func (l *loop) newDiscriminator() uint32 {
	for {
		if d := rand.Uint32(); d != 0 && l.byDiscr[d] == nil {
			return d
		}
	}
}

func (l *loop) remove(addr netip.Addr) {
	p := l.byPeer[addr]
	if p == nil {
		return
	}
	now := time.Now()
	p.sess.SetAdminDown(now, true)
	l.advancePeer(p, now)
	l.drop(p)
}

func (l *loop) drop(p *peer) {
	delete(l.byPeer, p.cfg.Peer)
	delete(l.byDiscr, p.sess.localDiscr)
	if err := p.conn.Close(); err != nil {
		l.s.log.Debug("bfd: closing session socket", "peer", p.cfg.Peer, "err", err)
	}
	l.s.log.Info("bfd session removed", "peer", p.cfg.Peer)
}

func (l *loop) closeAll() {
	for _, p := range l.byPeer {
		l.drop(p)
	}
}

// stopStep takes the sessions administratively down on the first call and
// reports when the stop may finish: every neighbour answered with Down (or
// AdminDown), or the longest detection time passed.
func (l *loop) stopStep(now time.Time) (finished bool) {
	if l.stopBy.IsZero() {
		wait := time.Duration(0)
		for _, p := range l.byPeer {
			wait = max(wait, p.sess.DetectionTime())
			p.sess.SetAdminDown(now, true)
		}
		l.stopBy = now.Add(wait)
		l.advance(now)
	}
	if !now.Before(l.stopBy) {
		return true
	}
	for _, p := range l.byPeer {
		if st := p.sess.Status(); st.RemoteState == Up || st.RemoteState == Init {
			return false
		}
	}
	return true
}

func (l *loop) receive(d Datagram) {
	l.stats.Received++
	if d.TTL != gtsmTTL {
		l.stats.BadTTL++
		l.s.log.Debug("bfd: dropped a packet with TTL below 255", "peer", d.Src, "ttl", d.TTL)
		return
	}
	pkt, err := ParsePacket(d.Data)
	if err != nil {
		l.stats.Malformed++
		l.s.log.Debug("bfd: dropped a packet", "peer", d.Src, "err", err)
		return
	}
	var p *peer
	if pkt.YourDiscriminator != 0 {
		p = l.byDiscr[pkt.YourDiscriminator]
		if p != nil && p.cfg.Peer != d.Src {
			l.stats.WrongSource++
			return
		}
	} else if p = l.byPeer[d.Src]; p != nil && p.cfg.Local.IsValid() && d.Dst.IsValid() && d.Dst != p.cfg.Local {
		p = nil
	}
	if p == nil {
		l.stats.NoSession++
		return
	}
	now := d.At
	if now.IsZero() {
		now = time.Now()
	}
	old := p.sess.State()
	if p.sess.Receive(now, pkt) {
		l.changed(p, old, now)
	}
}

// advance runs every session's timers, sends what is due and returns how
// long to sleep until the next deadline.
func (l *loop) advance(now time.Time) time.Duration {
	wait := time.Hour
	for _, p := range l.byPeer {
		l.advancePeer(p, now)
		if at, immediately, ok := p.sess.Deadline(); immediately {
			wait = 0
		} else if ok {
			wait = min(wait, at.Sub(now))
		}
	}
	return max(wait, 0)
}

func (l *loop) advancePeer(p *peer, now time.Time) {
	old := p.sess.State()
	out, changed := p.sess.Advance(now)
	if out != nil {
		p.buf = out.Append(p.buf[:0])
		if err := p.conn.Send(p.buf); err != nil {
			l.stats.SendErrors++
			l.s.log.Debug("bfd: send failed", "peer", p.cfg.Peer, "err", err)
		} else {
			l.stats.Sent++
		}
	}
	if changed {
		l.changed(p, old, now)
	}
}

func (l *loop) changed(p *peer, old State, now time.Time) {
	st := p.sess.Status()
	c := Change{Peer: p.cfg.Peer, Old: old, State: st.State, Diag: st.Diag, RemoteState: st.RemoteState, At: now}
	lvl := slog.LevelInfo
	if old == Up {
		lvl = slog.LevelWarn
	}
	l.s.log.Log(context.Background(), lvl, "bfd session "+st.State.String(), "peer", p.cfg.Peer,
		"from", old.String(), "diag", st.Diag.String(), "remote_state", st.RemoteState.String())
	l.s.subs.notify(c)
}
