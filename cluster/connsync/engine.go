package connsync

import (
	"cmp"
	"fmt"
	"log/slog"
	"net/netip"
	"time"

	"github.com/lvsd/lvsd/cluster/identity"
)

// warnEvery limits warnings about dropped data to one per interval; the
// ones in between are counted in the next.
const warnEvery = 10 * time.Second

// engine is the relay's state and logic. Only the Run goroutine touches it.
// Every method takes the current time, so tests drive it without a clock
// or goroutines.
type engine struct {
	cfg   Config
	log   *slog.Logger
	st    *counters
	out   datagramWriter
	epoch time.Time // the cache's monotonic clock counts from here
	self  origin    // what this relay's messages name as their sender

	senders     *senders             // who sent what: replays are refused
	services    func() *services     // configured here; nil: none yet
	replayEnded func(sender string)  // a member finished replaying its cache to this director
	logged      map[string]time.Time // refusals logged, by kind and sender

	cache        *cache
	fresh        msgBuilder    // records from the master waiting for FlushDelay
	freshEntries []entryRef    // their cache entries
	freshAt      time.Duration // when the oldest of them arrived
	ring         *sentRing     // entries of the last fresh broadcasts (antientropy.go)
	replays      []*replay
	rr           int // next replay to serve, round robin

	members     map[string]bool      // current members, who may send requests
	lastRequest map[string]time.Time // by member, for the rate limit

	// A token bucket paces replays: a full replay of a large cache must
	// not flood memberlist's receive queue, which heartbeats share.
	tokens   float64
	refilled time.Duration

	lastWarn    time.Duration
	suppressed  int
	body, dgram []byte // scratch for datagrams to the backup daemon
	applied     []rec  // scratch: the records of body
	conns       []Conn // scratch for Config.Applied

	origins   *origins      // first directors of applied connections; nil without Config.Applied
	lastSweep time.Duration // of origins

	// What is written is checked against the kernel (confirm.go).
	backupUp   bool                   // the backup daemon runs: always, without Config.Kernel
	held       []heldMsg              // received while it did not
	heldLogged bool                   // the hold was logged
	refetch    map[string]bool        // directors whose messages did not fit the hold
	catchingUp func() bool            // the start-up catch-up still waits (catchup.go)
	markerCame func(sender string)    // an awaited end marker came; its records are being confirmed
	pending    map[string]*confirming // replays to confirm, by sender
	tracked    int                    // records in pending
	verifying  bool                   // a read of the table is under way
	nextVerify time.Duration          // no read before
}

func newEngine(cfg Config, st *counters, log *slog.Logger, out datagramWriter, now time.Time) *engine {
	e := &engine{
		cfg: cfg, log: log, st: st, out: out, epoch: now,
		self:     origin{name: cfg.Transport.Name(), incarnation: cmp.Or(cfg.Incarnation, uint64(now.UnixNano())), keys: cfg.Identity},
		senders:  newSenders(cfg.MaxAge, cfg.MaxClockSkew),
		services: func() *services { return nil },
		logged:   map[string]time.Time{},
		cache:    newCache(cfg.MaxEntries, defaultTimeout),
		ring:     new(sentRing),
		members:  map[string]bool{}, lastRequest: map[string]time.Time{},
		tokens:   burst(cfg.MaxRate),
		lastWarn: -warnEvery,
		backupUp: cfg.Kernel == nil,
		refetch:  map[string]bool{}, pending: map[string]*confirming{},
		catchingUp: func() bool { return false },
	}
	e.fresh.from = &e.self
	if cfg.Applied != nil {
		e.origins = newOrigins(cfg.MaxEntries)
	}
	return e
}

// burst is how many messages may leave at once: 10 ms of the rate.
func burst(rate int) float64 { return max(1, float64(rate)/100) }

func (e *engine) mono(now time.Time) time.Duration { return now.Sub(e.epoch) }

// fromMaster takes a datagram the local master daemon sent: its records
// are cached and queued to go to every member.
func (e *engine) fromMaster(b []byte, now time.Time) (relayed, pushers int) {
	_, recs, err := parseDatagram(b)
	if err != nil {
		e.st.droppedInvalid.Add(1)
		e.warn(now, "dropped a datagram from the master daemon", "err", err)
		return 0, 0
	}
	t := e.mono(now)
	e.st.masterDatagrams.Add(1)
	e.st.masterRecords.Add(uint64(len(recs)))
	for _, r := range recs {
		if e.isPusher(r) {
			pushers++
			continue
		}
		relayed++
		if e.origins != nil && r.flags()&connFSync != 0 {
			if o := e.origins.of(r, t); o != "" {
				r = withOrigin(r, o)
				e.origins.note(r, o, t) // this director keeps the connection alive now
			}
		}
		en, evicted := e.cache.put(r, t)
		if evicted {
			e.st.evicted.Add(1)
			e.warn(now, "connection cache full, evicted the oldest entry", "max_entries", e.cfg.MaxEntries)
		}
		if !e.fresh.fits(r) {
			e.flush(now)
		}
		if e.fresh.empty() {
			e.freshAt = t
		}
		e.fresh.add(r)
		e.freshEntries = append(e.freshEntries, en)
	}
	e.st.cacheSize.Store(int64(e.cache.len()))
	return relayed, pushers
}

// isPusher reports whether r is a connection to the pusher service.
func (e *engine) isPusher(r rec) bool {
	p := e.cfg.Pusher
	return p.IsValid() && r.protocol() == protoUDP && r.vaddr() == p.Addr() && r.vport() == p.Port()
}

// flush broadcasts the records waiting from the master.
func (e *engine) flush(now time.Time) {
	if e.fresh.empty() {
		return
	}
	e.self.stream++
	e.ring.record(e.self.stream, e.freshEntries)
	e.freshEntries = e.freshEntries[:0]
	msg, n := e.fresh.finish(0, now)
	e.cfg.Transport.Broadcast(msg)
	e.sent(n, false)
}

func (e *engine) sent(records int, replayed bool) {
	e.tokens-- // may go below zero: fresh records are never held back
	e.st.sentMessages.Add(1)
	e.st.sentRecords.Add(uint64(records))
	if replayed {
		e.st.replayedRecords.Add(uint64(records))
	}
}

// deliver applies a relay message from a peer: its records go to the local
// backup daemon as one datagram, if the message is fresh and as far as its
// records are authorised.
func (e *engine) deliver(b []byte, at time.Time) {
	m, err := decodeMessage(b)
	if err != nil {
		e.st.droppedInvalid.Add(1)
		e.warn(at, "dropped a relay message", "err", err)
		return
	}
	if !e.proven(m, at) {
		return
	}
	w := e.accepts(m, at)
	switch {
	case w == nil:
	case m.flags == flagRequest:
		// What this director sends does not wait for its own backup daemon.
		w.observe(m, false)
		e.answer(m, at)
	case !e.backupUp:
		e.hold(m, w, at)
	default:
		e.take(m, w, at)
	}
}

// take applies an accepted message that is not a request.
func (e *engine) take(m message, w *window, at time.Time) {
	switch m.flags {
	case flagReplay | flagReplayEnd:
		w.observe(m, false)
		e.replayDone(m.sender, at)
		return
	case flagSummary:
		w.observe(m, false)
		e.st.summariesReceived.Add(1)
		return
	}
	applied := e.apply(m, at)
	w.observe(m, m.flags == 0 && applied)
}

// apply writes m's records that are fresh and authorised to the local
// backup daemon, and reports whether it is done with m: every record
// applied, or refused for good. A record refused because its sender does
// not hold the VIP yet in this director's view, or a failed write, leaves
// m to be asked for again (antientropy.go).
func (e *engine) apply(m message, at time.Time) (done bool) {
	lag := at.Sub(m.sent)
	e.st.observeLag(lag)
	e.st.receivedMessages.Add(1)
	e.st.receivedRecords.Add(uint64(len(m.recs)))
	if m.flags&flagReplay == 0 {
		e.st.receivedFresh.Add(uint64(len(m.recs)))
	}
	body, n, stale, notHolder := e.body[:0], 0, 0, false
	applied := e.applied[:0]
	for _, r := range m.recs {
		// Applying a record whose timeout ran out in transit would revive
		// a connection the master has already expired.
		if s := r.timeout(); s != 0 && lag >= time.Duration(s)*time.Second {
			stale++
			continue
		}
		if ok, holder := e.authorized(m.sender, r, at); !ok {
			notHolder = notHolder || !holder
			continue
		}
		body, _ = appendRecord(body, r)
		applied = append(applied, r)
		n++
		if e.origins != nil {
			e.origins.note(r, recordOrigin(r, m.sender), e.mono(at))
		}
	}
	e.body, e.applied = body, applied
	if stale > 0 {
		e.st.droppedStale.Add(uint64(stale))
		e.warn(at, "dropped records that expired in transit", "peer", m.sender, "records", stale, "lag", lag)
	}
	if n == 0 {
		return !notHolder
	}
	e.dgram = appendDatagram(e.dgram[:0], e.cfg.SyncID, n, body)
	if err := e.out.Write(e.dgram); err != nil {
		e.st.droppedWrite.Add(1)
		e.warn(at, "could not write to the backup daemon", "peer", m.sender, "err", err)
		return false
	}
	e.st.appliedDatagrams.Add(1)
	e.st.appliedRecords.Add(uint64(n))
	if m.flags&flagReplay != 0 {
		e.track(m.sender, applied)
	}
	if e.cfg.Applied != nil {
		e.conns = appendConns(e.conns[:0], applied, m.sender)
		e.cfg.Applied(e.conns)
	}
	return !notHolder
}

// proven reports whether m may be looked at: with cluster.directors, it
// is version 4 and signed by a key listed under its sender. It counts and
// logs a refusal. This comes before the freshness check, whose memory of a
// sender only that sender may change.
func (e *engine) proven(m message, at time.Time) bool {
	keys := e.cfg.Identity
	if !keys.Enforced() {
		return true
	}
	err := keys.Verify(m.sender, m.signed, m.sig)
	if err == nil && m.version < msgVersion {
		err = identity.Unsigned
	}
	if err == nil {
		return true
	}
	e.st.droppedUnproven.Add(1)
	e.logFirst(at, "unproven "+err.Error(), m.sender, "refused a relay message that does not prove its sender (cluster.directors)",
		"peer", m.sender, "why", err.Error(), "version", m.version)
	return false
}

// accepts returns the sender's window if m is fresh; it counts and logs a
// message that is a replay or whose time is out of bounds.
func (e *engine) accepts(m message, at time.Time) *window {
	var w *window
	why, detail := msgReplayed, "this director's own message"
	if m.sender != e.self.name {
		w, why, detail = e.senders.check(m, at)
	}
	switch why {
	case msgFresh:
		return w
	case msgReplayed:
		e.st.droppedReplayed.Add(1)
		e.logFirst(at, "replayed", m.sender, "refused a replayed relay message", "peer", m.sender, "why", detail)
	case msgTooOld:
		e.st.droppedTooOld.Add(1)
		e.logFirst(at, "old", m.sender, "refused an old relay message: a replay, or the clocks of the directors disagree",
			"peer", m.sender, "why", detail)
	case msgFuture:
		e.st.droppedFuture.Add(1)
		e.logFirst(at, "future", m.sender, "refused a relay message from the future: the clocks of the directors disagree",
			"peer", m.sender, "why", detail)
	}
	return nil
}

// authorized reports whether r may be applied: its service and real server
// are configured here and its sender may speak for the VIP (holder). It
// counts and logs a refusal.
func (e *engine) authorized(sender string, r rec, at time.Time) (ok, holder bool) {
	vip, ok := e.services().lookup(r)
	if !ok {
		e.st.droppedUnconfigured.Add(1)
		e.logFirst(at, "unconfigured", sender, "refused relayed connections of a service or real server not configured here",
			"peer", sender, "vip", r.vaddr(), "port", r.vport(), "protocol", r.protocol(), "fwmark", r.fwmark(), "backend", r.dest())
		return false, true
	}
	if e.cfg.Authority == nil || !e.cfg.Authority.MaySend(sender, vip) {
		e.st.droppedNotHolder.Add(1)
		e.logFirst(at, "not holder", sender, "refused relayed connections of a VIP the sender does not hold",
			"peer", sender, "vip", vip)
		return false, false
	}
	return true, true
}

// firstLogEvery is how often a kind of refusal from one sender is logged:
// the first time, then at most once per interval; the counters have them
// all.
const firstLogEvery = time.Hour

// logFirst logs a refusal the first time it happens for this kind and
// sender (then again after firstLogEvery).
func (e *engine) logFirst(at time.Time, kind, sender, msg string, args ...any) {
	key := kind + "\x00" + sender
	if last, ok := e.logged[key]; ok && at.Sub(last) < firstLogEvery {
		return
	}
	if len(e.logged) >= 1024 {
		clear(e.logged)
	}
	e.logged[key] = at
	e.log.Warn(msg, args...)
}

// release forgets the connections to a VIP this director no longer holds:
// the new holder's master daemon reports them now, and replaying older
// records over its live ones would move them back in time.
func (e *engine) release(vip netip.Addr) {
	n := e.cache.releaseVIP(vip)
	e.st.cacheSize.Store(int64(e.cache.len()))
	e.log.Info("forgot the connections of a released VIP", "vip", vip, "connections", n)
}

// forget drops the cached connections of destinations whose connections
// this director has just dropped (a reset): replayed, they would bring the
// dropped connections back on the other directors, bound to the backend
// they left; a backup then ignores the newer record of the same flow naming
// another backend when it is flagged inactive, as UDP's are (ip_vs_proc_conn).
func (e *engine) forget(vip netip.Addr, dests []netip.AddrPort) {
	n := e.cache.forgetDests(vip, dests)
	e.st.cacheSize.Store(int64(e.cache.len()))
	e.log.Info("forgot the connections of reset destinations", "vip", vip, "destinations", fmt.Sprint(dests), "connections", n)
}

// nextWake returns when the engine next has work without new input.
func (e *engine) nextWake(now time.Time) (time.Time, bool) {
	var at time.Time
	ok := false
	if !e.fresh.empty() {
		at, ok = e.epoch.Add(e.freshAt+e.cfg.FlushDelay), true
	}
	if e.verificationWaits() {
		if v := e.epoch.Add(e.nextVerify); !ok || v.Before(at) {
			at, ok = v, true
		}
	}
	if len(e.replays) > 0 {
		wait := time.Duration(0)
		if e.tokens < 1 {
			wait = time.Duration((1 - e.tokens) / float64(e.cfg.MaxRate) * float64(time.Second))
		}
		if r := now.Add(wait); !ok || r.Before(at) {
			at, ok = r, true
		}
	}
	return at, ok
}

// tick does what is due: flushing records from the master and replaying.
func (e *engine) tick(now time.Time) {
	if t := e.mono(now); e.origins != nil && t-e.lastSweep >= time.Minute {
		e.origins.sweep(t)
		e.lastSweep = t
	}
	if !e.fresh.empty() && e.mono(now) >= e.freshAt+e.cfg.FlushDelay {
		e.flush(now)
	}
	if len(e.replays) > 0 {
		e.pump(now)
	}
	e.stopConfirming()
}

// warn logs a drop, at most once per warnEvery.
func (e *engine) warn(now time.Time, msg string, args ...any) {
	t := e.mono(now)
	if t-e.lastWarn < warnEvery {
		e.suppressed++
		return
	}
	e.log.Warn(msg, append(args, "suppressed", e.suppressed)...)
	e.lastWarn, e.suppressed = t, 0
}
