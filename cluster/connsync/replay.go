package connsync

import (
	"slices"
	"time"
)

// Replays send the cache, or a lost message's connections (antientropy.go),
// to members, paced by the engine's token bucket.

// replay sends the whole cache to one member, or to every member when to
// is empty; or, with resend, the connections of entries to one member
// (antientropy.go).
type replay struct {
	to      string
	cur     *cursor // not with resend
	resend  bool
	entries []entryRef // of a resend, still to send
	started time.Duration
	records int
}

// startReplay starts sending the cache to a member (to every member if to
// is empty). A member that joins again starts over, and what was queued to
// be sent again to it goes with the rest; a periodic replay still running
// is left to finish.
func (e *engine) startReplay(to string, now time.Time) {
	switch {
	case to != "":
		e.stopReplay(to)
	case e.findReplay("") >= 0:
		e.log.Debug("previous replay to every member still running")
		return
	}
	e.replays = append(e.replays, &replay{to: to, cur: e.cache.newCursor(), started: e.mono(now)})
}

// stopReplay stops everything being sent to a member alone.
func (e *engine) stopReplay(to string) {
	e.replays = slices.DeleteFunc(e.replays, func(rp *replay) bool {
		if rp.to != to {
			return false
		}
		if rp.cur != nil {
			e.cache.closeCursor(rp.cur)
		}
		return true
	})
}

// findReplay returns the index of the whole cache's replay to to, or -1.
func (e *engine) findReplay(to string) int {
	return slices.IndexFunc(e.replays, func(r *replay) bool { return r.to == to && !r.resend })
}

// findResend returns what is queued to be sent again to member, or nil.
func (e *engine) findResend(member string) *replay {
	if i := slices.IndexFunc(e.replays, func(r *replay) bool { return r.to == member && r.resend }); i >= 0 {
		return e.replays[i]
	}
	return nil
}

// pump sends replay messages while the rate allows, serving the replays in
// turn.
func (e *engine) pump(now time.Time) {
	t := e.mono(now)
	e.tokens = min(burst(e.cfg.MaxRate), e.tokens+(t-e.refilled).Seconds()*float64(e.cfg.MaxRate))
	e.refilled = t
	for e.tokens >= 1 && len(e.replays) > 0 {
		i := e.rr % len(e.replays)
		rp := e.replays[i]
		msg, n := e.replayMessage(rp, t, now)
		if n == 0 {
			e.log.Debug("replay done", "member", rp.to, "records", rp.records, "duration", t-rp.started, "resend", rp.resend)
			if rp.cur != nil {
				e.cache.closeCursor(rp.cur)
			}
			e.replays = slices.Delete(e.replays, i, i+1)
			if rp.to != "" && !rp.resend {
				// The member may be starting and waits for this (catchup.go).
				end, _ := (&msgBuilder{from: &e.self}).finish(flagReplay|flagReplayEnd, now)
				e.cfg.Transport.SendTo(rp.to, end)
			}
			continue
		}
		if rp.to == "" {
			e.cfg.Transport.Broadcast(msg)
		} else {
			e.cfg.Transport.SendTo(rp.to, msg)
		}
		rp.records += n
		e.sent(n, true)
		if rp.resend {
			e.st.resentRecords.Add(uint64(n))
		}
		e.rr = i + 1
	}
	e.st.cacheSize.Store(int64(e.cache.len()))
}

// replayMessage fills a message from the replay's cursor or entries. Each
// record's timeout becomes what is left of it, so a replay does not extend
// the backup's copy beyond what the master last reported.
func (e *engine) replayMessage(rp *replay, t time.Duration, now time.Time) ([]byte, int) {
	m := msgBuilder{from: &e.self}
	for {
		en := e.nextToReplay(rp, t)
		if !en.ok() || !m.fits(e.cache.rec(en)) {
			break
		}
		if rp.resend {
			rp.entries = rp.entries[1:]
		} else {
			rp.cur.advance()
		}
		c := m.add(e.cache.rec(en))
		if c.timeout() != 0 {
			left := int64((e.cache.deadline(en) - t + time.Second - 1) / time.Second)
			c.setTimeout(uint32(min(max(left, 1), int64(c.timeout()))))
		}
	}
	if m.empty() {
		return nil, 0
	}
	return m.finish(flagReplay, now)
}

// nextToReplay returns the replay's next live entry without moving past
// it, or the zero entryRef at the end. A resend skips the entries the
// cache no longer holds: the connection is gone, or its record outgrew its
// slot, and that newer record went out in a later broadcast.
func (e *engine) nextToReplay(rp *replay, t time.Duration) entryRef {
	if !rp.resend {
		en, expired := e.cache.peek(rp.cur, t)
		e.st.expired.Add(uint64(expired))
		return en
	}
	for len(rp.entries) > 0 && !e.cache.holds(rp.entries[0], t) {
		rp.entries = rp.entries[1:]
	}
	if len(rp.entries) == 0 {
		return entryRef{}
	}
	return rp.entries[0]
}
