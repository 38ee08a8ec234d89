package connsync

import (
	"bytes"
	"context"
	"encoding/binary"
	"log/slog"
	"maps"
	"net/netip"
	"slices"
	"time"
)

// A datagram written to the backup daemon's socket has left the relay's
// hands: the kernel drops it without a word when no backup daemon listens
// yet (the agent starts the daemons in its first pass, after the relay has
// started and the others have replayed their connections to it), or when
// the daemon's socket buffer is full. A starting director that took such a
// write for the state it was handed would announce its VIPs without the
// entries of the flows the routers then move to it (seen in a lab: 59 of
// 200 flows had none, the counters said every record was applied). So,
// with a Config.Kernel:
//
//   - relay messages received before the backup daemon runs are held, up
//     to maxHeld, and taken in order once it does; a director whose
//     messages did not fit is asked for its whole cache then;
//   - the records of the replays a starting director receives are kept
//     until their sender's end marker; then the IPVS connection table is
//     read, the records it lacks are written again (at most
//     maxConfirmRounds times) and only then is the sender's state counted
//     as arrived (catchup.go), so the start-up hold ends once the state is
//     in the kernel.

// Kernel is the local kernel as the relay checks what it writes.
// Implementations must be safe for use from a goroutine of their own.
type Kernel interface {
	// BackupRunning reports whether the kernel's backup sync daemon runs
	// where the relay writes (its interface, BackupPort and SyncID).
	BackupRunning(ctx context.Context) (bool, error)
	// EachConnection calls f for each entry of the IPVS connection table,
	// persistence templates left out.
	EachConnection(ctx context.Context, f func(ConnID)) error
}

// ConnID is a connection as the kernel's table finds it (ip_vs_conn_in_get
// without the address family, which the addresses carry).
type ConnID struct {
	Protocol uint8          // IP protocol number
	Client   netip.AddrPort // caddr:cport
	Virtual  netip.AddrPort // vaddr:vport
}

const (
	// maxHeld bounds the relay messages held while the backup daemon does
	// not run: about 4.5 MB and 110,000 IPv4 records.
	maxHeld = 2 * deliveryQueue
	// backupPollInterval is how often the relay looks for the backup
	// daemon until it runs.
	backupPollInterval = 100 * time.Millisecond
	// maxConfirmRounds bounds how often the records the kernel's table
	// lacks are written again before the sender's state is taken as it is.
	maxConfirmRounds = 3
	// confirmRetryDelay is how long the backup daemon gets to take records
	// written again before the table is read again.
	confirmRetryDelay = 300 * time.Millisecond
	// minConfirmLife: a record that has less than this to live may be gone
	// from the table by the time it is read; it is applied but not
	// confirmed.
	minConfirmLife = 5
)

// heldMsg is a relay message received while the backup daemon did not run.
type heldMsg struct {
	m  message
	w  *window
	at time.Time
}

// confirming are the records of one director's replays to this starting
// director, kept until the kernel's table has them.
type confirming struct {
	recs   map[ConnID]rec // not yet found in the table
	found  int            // found in it already
	ended  bool           // the end marker came
	rounds int            // the table was read this many times with records missing
}

// verifyRequest asks the kernel goroutine which of ids its table lacks.
type verifyRequest struct {
	peers []string
	ids   map[ConnID]bool
}

// verifyResult answers a verifyRequest.
type verifyResult struct {
	peers   []string
	missing map[ConnID]bool
	err     error
}

// confirms reports whether the relay checks its writes against a kernel.
func (e *engine) confirms() bool { return e.cfg.Kernel != nil }

// hold keeps a relay message until the backup daemon runs. One that does
// not fit is dropped, and its sender asked for its whole cache once the
// daemon runs.
func (e *engine) hold(m message, w *window, at time.Time) {
	if len(e.held) == 0 && !e.heldLogged {
		e.heldLogged = true
		e.log.Info("holding the other directors' connections until the kernel's backup sync daemon runs", "peer", m.sender)
	}
	if len(e.held) >= maxHeld {
		e.st.droppedBackupDown.Add(1)
		e.refetch[m.sender] = true
		e.warn(at, "dropped a relay message: the kernel's backup sync daemon does not run yet and the hold is full",
			"peer", m.sender, "held", len(e.held))
		return
	}
	e.held = append(e.held, heldMsg{m, w, at})
	e.st.heldMessages.Add(1)
}

// backupStarted: the backup daemon runs. The held messages are taken in
// the order they came, then the directors some of whose messages were
// dropped are asked for their whole cache, whose end marker then counts.
func (e *engine) backupStarted(now time.Time) {
	e.backupUp = true
	e.log.Info("the kernel's backup sync daemon runs; writing the connections held for it",
		"messages", len(e.held), "refetch", slices.Sorted(maps.Keys(e.refetch)))
	for _, h := range e.held {
		if e.refetch[h.m.sender] && h.m.flags == flagReplay|flagReplayEnd {
			h.w.observe(h.m, false)
			continue // its replay lost messages: the one asked for below ends it
		}
		e.take(h.m, h.w, h.at)
	}
	e.held = nil
	for name := range e.refetch {
		if w := e.senders.m[name]; w != nil {
			e.st.requestsSent.Add(1)
			e.cfg.Transport.SendTo(name, e.self.requestMessage(request{incarnation: w.incarnation}, now))
		}
	}
	clear(e.refetch)
}

// track keeps the records of a replay to this starting director until the
// kernel's table is seen to hold them, as far as MaxEntries allow.
func (e *engine) track(sender string, recs []rec) {
	if !e.confirms() || !e.catchingUp() {
		return
	}
	p := e.pending[sender]
	if p == nil {
		p = &confirming{recs: map[ConnID]rec{}}
		e.pending[sender] = p
	}
	for _, r := range recs {
		if r.flags()&connFTemplate != 0 || r.timeout() != 0 && r.timeout() < minConfirmLife {
			continue
		}
		id := connID(r)
		if _, ok := p.recs[id]; !ok {
			if e.tracked >= e.cfg.MaxEntries {
				e.st.unconfirmedRecords.Add(1) // never checked
				continue
			}
			e.tracked++
		}
		p.recs[id] = rec(bytes.Clone(r))
	}
}

// replayDone: sender's end marker came. Its state counts as arrived once
// the kernel's table holds its records (verified).
func (e *engine) replayDone(sender string, now time.Time) {
	p := e.pending[sender]
	if !e.confirms() || p == nil || len(p.recs) == 0 || !e.catchingUp() {
		e.forgetPending(sender)
		if e.replayEnded != nil {
			e.replayEnded(sender)
		}
		return
	}
	p.ended = true
	if e.markerCame != nil {
		e.markerCame(sender)
	}
	e.log.Debug("replay received; checking the kernel's connection table", "peer", sender, "connections", len(p.recs))
}

// verificationWaits reports whether a read of the table waits for
// nextVerify only.
func (e *engine) verificationWaits() bool {
	if !e.backupUp || e.verifying {
		return false
	}
	for _, p := range e.pending {
		if p.ended {
			return true
		}
	}
	return false
}

// verification returns the next check of the kernel's table that is due:
// the records of every director whose replay ended, in one read.
func (e *engine) verification(now time.Time) (verifyRequest, bool) {
	if !e.verificationWaits() || e.mono(now) < e.nextVerify {
		return verifyRequest{}, false
	}
	var req verifyRequest
	for name, p := range e.pending {
		if !p.ended {
			continue
		}
		if req.ids == nil {
			req.ids = map[ConnID]bool{}
		}
		req.peers = append(req.peers, name)
		for id := range p.recs {
			req.ids[id] = true
		}
	}
	if req.peers == nil {
		return verifyRequest{}, false
	}
	e.verifying = true
	return req, true
}

// verified takes what the kernel's table lacked: a director's state is
// confirmed when nothing is missing or the rounds are spent; the missing
// records are written again otherwise.
func (e *engine) verified(res verifyResult, now time.Time) {
	e.verifying = false
	e.nextVerify = e.mono(now) + confirmRetryDelay
	for _, name := range res.peers {
		p := e.pending[name]
		if p == nil {
			continue // left meanwhile
		}
		var missing []rec
		for id, r := range p.recs {
			if res.err == nil && !res.missing[id] {
				p.found++
				delete(p.recs, id)
				e.tracked--
			} else {
				missing = append(missing, r)
			}
		}
		if len(missing) > 0 && p.rounds < maxConfirmRounds {
			p.rounds++
			if res.err == nil {
				e.st.retriedRecords.Add(uint64(e.writeRecords(missing)))
			}
			continue
		}
		e.st.confirmedRecords.Add(uint64(p.found))
		e.st.unconfirmedRecords.Add(uint64(len(missing)))
		switch {
		case res.err != nil:
			e.log.Warn("could not read the kernel's connection table to confirm a director's connections; taking them as applied",
				"peer", name, "connections", len(missing)+p.found, "err", res.err)
		case len(missing) > 0:
			e.log.Warn("the kernel's connection table still lacks some of a director's connections; taking its state as it is",
				"peer", name, "confirmed", p.found, "missing", len(missing), "rounds", p.rounds)
		default:
			e.log.Info("a director's connections are in the kernel's table", "peer", name, "connections", p.found, "rewritten_rounds", p.rounds)
		}
		e.forgetPending(name)
		if e.replayEnded != nil {
			e.replayEnded(name)
		}
	}
}

// writeRecords writes recs to the backup daemon again, in datagrams the
// size of relay messages, and returns how many were written.
func (e *engine) writeRecords(recs []rec) int {
	written := 0
	for len(recs) > 0 {
		body, n := e.body[:0], 0
		for n < len(recs) && n < 255 && syncHeaderLen+len(body)+paddedLen(body, recs[n]) <= maxMessageLen {
			body, _ = appendRecord(body, recs[n])
			n++
		}
		e.body = body
		e.dgram = appendDatagram(e.dgram[:0], e.cfg.SyncID, n, body)
		if err := e.out.Write(e.dgram); err != nil {
			e.st.droppedWrite.Add(1)
		} else {
			written += n
		}
		recs = recs[n:]
	}
	return written
}

// forgetPending drops what is kept of sender's replays.
func (e *engine) forgetPending(sender string) {
	if p := e.pending[sender]; p != nil {
		e.tracked -= len(p.recs)
		delete(e.pending, sender)
	}
}

// stopConfirming drops everything kept once the start is over: the
// catch-up waits for nothing any more (its limit passed).
func (e *engine) stopConfirming() {
	if len(e.pending) == 0 || e.catchingUp() {
		return
	}
	for name := range e.pending {
		e.forgetPending(name)
	}
}

// connID is r's connection as the kernel's table lists it.
func connID(r rec) ConnID {
	n := r.addrLen()
	client, _ := netip.AddrFromSlice(r[offAddrs : offAddrs+n])
	return ConnID{
		Protocol: r.protocol(),
		Client:   netip.AddrPortFrom(client, binary.BigEndian.Uint16(r[offCport:])),
		Virtual:  netip.AddrPortFrom(r.vaddr(), r.vport()),
	}
}

// watchKernel runs on a goroutine of its own: it waits until the backup
// daemon runs, closes up, then reads the connection table for each
// request until ctx ends.
func watchKernel(ctx context.Context, k Kernel, log *slog.Logger, up chan<- struct{}, reqs <-chan verifyRequest, results chan<- verifyResult) {
	poll := time.NewTicker(backupPollInterval)
	defer poll.Stop()
	var lastWarn time.Time
	for {
		ok, err := k.BackupRunning(ctx)
		if ok {
			break
		}
		if err != nil && time.Since(lastWarn) >= warnEvery {
			lastWarn = time.Now()
			log.Warn("cannot tell whether the kernel's backup sync daemon runs", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-poll.C:
		}
	}
	close(up)
	for {
		select {
		case <-ctx.Done():
			return
		case req := <-reqs:
			res := verifyResult{peers: req.peers, missing: maps.Clone(req.ids)}
			res.err = k.EachConnection(ctx, func(c ConnID) { delete(res.missing, c) })
			select {
			case results <- res:
			case <-ctx.Done():
				return
			}
		}
	}
}
