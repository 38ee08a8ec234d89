package connsync

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// pushedOutWithin tells a pusher record another record pushed out from one
// the master's 2 s flush sent (it sends a buffer 2 to 3 s old: its thread
// checks every second), which must not start another push.
const pushedOutWithin = 1900 * time.Millisecond

// ErrNotSupported is returned by Run where the sync sockets do not exist
// (outside Linux).
var ErrNotSupported = errors.New("connection sync is not supported on this system")

// Transport carries relay messages to the other members of the cluster.
// Broadcast and SendTo are best effort, must not block for long, and are
// called from Run's goroutine only. msg is not modified after the call.
type Transport interface {
	// Name is this director's name in the cluster, which its messages
	// carry as their sender.
	Name() string
	// Broadcast sends msg to every live member but this one.
	Broadcast(msg []byte)
	// SendTo sends msg to one member, by the name MemberJoined got.
	SendTo(member string, msg []byte)
}

// Relay relays the kernel's connection sync between the directors. Create
// it with New and start it with Run; the other methods may be called from
// any goroutine, before or during Run.
type Relay struct {
	cfg        Config
	st         counters
	deliveries chan delivery
	running    atomic.Bool
	services   atomic.Pointer[services] // nil until SetServices
	catchUp    *catchUp

	mu    sync.Mutex // guards hints
	hints []hint
	wake  chan struct{} // signals hints, 1-buffered

	open openFunc                      // the sockets; tests replace it
	push func(to netip.AddrPort) error // sends one datagram from a new port; tests replace it
	now  func() time.Time              // tests replace it
}

type delivery struct {
	msg []byte
	at  time.Time
}

// hint is an event for Run: a member joined or left, a VIP was released,
// or some destinations of a VIP were reset (forget).
type hint struct {
	member string
	joined bool
	vip    netip.Addr
	forget bool             // with vip: forget only the connections to dests
	dests  []netip.AddrPort // of forget
}

// New checks cfg and returns a Relay; it opens nothing.
func New(cfg Config) (*Relay, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, fmt.Errorf("connection sync config: %w", err)
	}
	cfg.Log = cfg.Log.With("component", "connsync")
	return &Relay{
		cfg:        cfg,
		catchUp:    newCatchUp(time.Now(), cfg.CatchUpLimit, cfg.Log),
		deliveries: make(chan delivery, deliveryQueue),
		wake:       make(chan struct{}, 1),
		open:       openSockets,
		push:       pushDatagram,
		now:        time.Now,
	}, nil
}

// Deliver hands over a relay message received from the cluster; its sender
// is named inside it. It never blocks: if Run is behind, the message is
// dropped and counted. msg is copied.
func (r *Relay) Deliver(msg []byte) {
	if len(msg) > maxMessageLen {
		r.st.droppedInvalid.Add(1) // not worth copying; Run logs the count
		return
	}
	select {
	case r.deliveries <- delivery{msg: bytes.Clone(msg), at: r.now()}:
	default:
		r.st.droppedOverflow.Add(1)
	}
}

// SetServices sets the virtual services configured on this director with
// their real servers: only records of these are applied (until the first
// call, none is). Call it whenever the configuration loads.
func (r *Relay) SetServices(list []Service) { r.services.Store(indexServices(list)) }

// MemberJoined replays the cache to a member that joined or came back;
// while this director starts, it also awaits that member's replay.
func (r *Relay) MemberJoined(name string) {
	r.catchUp.joined(name)
	r.hint(hint{member: name, joined: true})
}

// MemberLeft stops a replay to a member that left.
func (r *Relay) MemberLeft(name string) {
	r.catchUp.left(name)
	r.hint(hint{member: name})
}

// CaughtUp reports whether every director heard since this relay started
// has replayed its connections to it, or Config.CatchUpLimit has passed
// (cluster.SyncCatchUp): until then the cluster node owns and announces
// nothing.
func (r *Relay) CaughtUp() bool { return r.catchUp.caughtUp(r.now()) }

// ReleaseVIP forgets the cached connections to vip, which this director no
// longer holds, so that they are not replayed over the new holder's. Call
// it when the VIP is removed here.
func (r *Relay) ReleaseVIP(vip netip.Addr) { r.hint(hint{vip: vip}) }

// ForgetDestinations forgets the cached connections of vip to dests (port
// 0: any port), whose connections this director dropped, so that they are
// not replayed to the others. Call it once the kernel's entries are gone.
func (r *Relay) ForgetDestinations(vip netip.Addr, dests []netip.AddrPort) {
	r.hint(hint{vip: vip, forget: true, dests: slices.Clone(dests)})
}

func (r *Relay) hint(h hint) {
	r.mu.Lock()
	r.hints = append(r.hints, h)
	r.mu.Unlock()
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// Stats returns the counters.
func (r *Relay) Stats() Stats { return r.st.snapshot() }

// Run opens the sockets in the calling thread's network namespace and
// relays until ctx is done, then returns nil. It returns an error if the
// sockets cannot be opened or reading fails. Run may be called once.
func (r *Relay) Run(ctx context.Context) error {
	if !r.running.CompareAndSwap(false, true) {
		return errors.New("connection sync relay is already running")
	}
	in, out, err := r.open(r.cfg)
	if err != nil {
		return fmt.Errorf("opening connection sync sockets on %s: %w", r.cfg.Interface, err)
	}
	defer out.Close()
	reads, readErr, stopReading := startReading(in)
	defer stopReading()

	e := newEngine(r.cfg, &r.st, r.cfg.Log, out, r.now())
	e.services = r.services.Load
	e.replayEnded = r.catchUp.ended
	e.markerCame = r.catchUp.markerCame
	e.catchingUp = func() bool { return !r.catchUp.over() }
	// The kernel is read on a goroutine of its own (confirm.go): a table
	// of a million entries takes seconds.
	var backupUp <-chan struct{}
	verifyReqs, verifyResults := make(chan verifyRequest, 1), make(chan verifyResult, 1)
	if r.cfg.Kernel != nil {
		up := make(chan struct{})
		backupUp = up
		kctx, stopKernel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() {
			defer close(done)
			watchKernel(kctx, r.cfg.Kernel, r.cfg.Log, up, verifyReqs, verifyResults)
		}()
		defer func() { stopKernel(); <-done }()
	}
	r.cfg.Log.Info("connection sync relay started", "interface", r.cfg.Interface, "group", r.cfg.Group,
		"master_port", r.cfg.MasterPort, "backup_port", r.cfg.BackupPort, "sync_id", r.cfg.SyncID)
	summaries := time.NewTicker(r.cfg.ResyncInterval)
	defer summaries.Stop()
	gapChecks := time.NewTicker(gapCheckInterval)
	defer gapChecks.Stop()
	var fullResyncs <-chan time.Time // nil: never
	if r.cfg.FullResyncInterval > 0 {
		t := time.NewTicker(r.cfg.FullResyncInterval)
		defer t.Stop()
		fullResyncs = t.C
	}
	logs := time.NewTicker(r.cfg.LogInterval)
	defer logs.Stop()
	wake := time.NewTimer(time.Hour)
	defer wake.Stop()
	// push fires PushDelay after the master's last datagram with records to
	// relay; pushing says the next datagram is the one the push caused,
	// which must not arm it again.
	push := time.NewTimer(time.Hour)
	push.Stop()
	defer push.Stop()
	pushing := false
	var lastPush time.Time
	prev, prevSum := r.st.snapshot(), r.st.summary()
	for {
		if at, ok := e.nextWake(r.now()); ok {
			wake.Reset(at.Sub(r.now()))
		} else {
			wake.Stop()
		}
		select {
		case <-ctx.Done():
			e.flush(r.now())
			return nil
		case err := <-readErr:
			return fmt.Errorf("reading from the master daemon: %w", err)
		case b := <-reads:
			relayed, pushers := e.fromMaster(b, r.now())
			switch {
			case pushing:
				pushing = false
			case !r.cfg.Pusher.IsValid():
			case relayed > 0:
				push.Reset(r.cfg.PushDelay)
			case pushers > 0 && r.now().Sub(lastPush) < pushedOutWithin:
				// Our last push's record, sent before the master's flush
				// time: a new record took its place and is alone now.
				push.Reset(r.cfg.PushDelay)
			}
		case <-push.C:
			if err := r.push(r.cfg.Pusher); err != nil {
				e.warn(r.now(), "could not push the master's last record out", "pusher", r.cfg.Pusher, "err", err)
				break
			}
			pushing, lastPush = true, r.now()
			r.st.pushes.Add(1)
		case d := <-r.deliveries:
			e.deliver(d.msg, d.at)
		case <-r.wake:
			r.takeHints(e)
		case <-summaries.C:
			e.summarize(r.now())
		case <-gapChecks.C:
			e.requestMissing(r.now())
		case <-fullResyncs:
			e.startReplay("", r.now())
		case <-logs.C:
			cur, sum := r.st.snapshot(), r.st.summary()
			logSummary(r.cfg.Log, prevSum, prev, cur, sum)
			prev, prevSum = cur, sum
		case <-backupUp:
			backupUp = nil
			e.backupStarted(r.now())
		case res := <-verifyResults:
			e.verified(res, r.now())
		case <-wake.C:
		}
		e.tick(r.now())
		if req, ok := e.verification(r.now()); ok {
			verifyReqs <- req // one at a time: never blocks
		}
	}
}

// startReading reads the master daemon's datagrams from in on a goroutine
// of its own; stop closes in and waits for it.
func startReading(in datagramReader) (reads <-chan []byte, readErr <-chan error, stop func()) {
	r, e, quit, done := make(chan []byte, 64), make(chan error, 1), make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		readLoop(in, r, e, quit)
	}()
	return r, e, func() { close(quit); in.Close(); <-done }
}

// takeHints applies the hints queued by the other goroutines.
func (r *Relay) takeHints(e *engine) {
	r.mu.Lock()
	hints := r.hints
	r.hints = nil
	r.mu.Unlock()
	for _, h := range hints {
		switch {
		case h.forget:
			e.forget(h.vip, h.dests)
		case h.vip.IsValid():
			e.release(h.vip)
		case h.joined:
			e.members[h.member] = true
			e.startReplay(h.member, r.now())
		default:
			delete(e.members, h.member)
			delete(e.lastRequest, h.member)
			e.stopReplay(h.member)
			e.forgetPending(h.member) // no longer awaited (catchup.go)
		}
	}
}

// readLoop passes the master's datagrams to Run until stop or an error.
func readLoop(in datagramReader, reads chan<- []byte, errs chan<- error, stop <-chan struct{}) {
	buf := make([]byte, 1<<16) // the largest UDP payload
	for {
		n, err := in.Read(buf)
		if err != nil {
			select {
			case <-stop: // closed by Run
			default:
				errs <- err
			}
			return
		}
		select {
		case reads <- bytes.Clone(buf[:n]):
		case <-stop:
			return
		}
	}
}
