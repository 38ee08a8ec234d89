package connsync

import (
	"encoding/binary"
	"time"
)

// Anti-entropy: a relay message can be lost (memberlist sends each as one
// UDP packet), and the kernel sends a connection again only when packets
// flow, so an idle connection whose record was lost would never reach the
// peer. Replaying the whole cache to everyone each interval made up for
// that at a cost that grows with the cache, not with the loss: a million
// connections were 37 MB per peer every 10 s. Instead, loss is found and
// only what was lost is sent again:
//
//   - each fresh broadcast carries a stream number (1, 2, ... per
//     incarnation) and every message carries the sender's latest one, so a
//     receiver sees a gap in the stream numbers it got;
//   - each ResyncInterval the sender broadcasts a summary, a header without
//     records, which reveals a lost last broadcast (nothing after it would
//     show the gap);
//   - a receiver checks its senders every gapCheckInterval and asks a sender
//     for the numbers that have been missing for at least one interval (so
//     that a message memberlist handed over late is not asked for), each
//     number once, in a request sent to that sender alone;
//   - the sender keeps the cache entries of its last ringSize broadcasts
//     and sends the member the CURRENT records of those connections, with
//     what is left of their timeouts, paced like a replay; an older record
//     would set a connection back to a state it has left. If a number has
//     left the ring, the request names an earlier incarnation, or the
//     receiver lost too much to list (more than maxRequestRanges ranges or a
//     whole window), the sender replays its whole cache to that member
//     alone;
//   - a full replay to every member every FullResyncInterval (minutes)
//     stays as a safety net for what this cannot see: a lost re-send, or
//     records a receiver refused for a while (a VIP holder it did not know
//     yet is handled: such a message counts as not received, so it is
//     asked for again once).
//
// Requests are sealed and checked for freshness like every message, come
// only from current members, at most one per minRequestGap each, and are
// validated (ascending, disjoint, bounded ranges, numbers the sender has
// sent).
const (
	// ringSize is how many of its last fresh broadcasts a sender can send
	// again: about 12 s at 10,000 new connections per second (29 records
	// per message), at most 4096 × 29 entry references (under 1 MB).
	ringSize = windowSize
	// gapCheckInterval is how often a receiver looks for gaps, and how
	// long a gap waits for a late message before it is asked for.
	gapCheckInterval = time.Second
	// maxRequestRanges bounds a request's ranges of missing numbers.
	maxRequestRanges = 32
	// minRequestGap is the least time between two requests a member's are
	// answered; an honest member sends one per gapCheckInterval at most.
	minRequestGap = gapCheckInterval / 2

	requestRangeLen = 16 // first and last, 8 bytes each
)

// seqRange is the stream numbers first..last.
type seqRange struct{ first, last uint64 }

// request asks a sender for the records of its fresh broadcasts in ranges;
// none: its whole cache. incarnation is the sender's incarnation the
// numbers belong to.
type request struct {
	incarnation uint64
	ranges      []seqRange
}

// requestMessage encodes a request from o: after the header, the sender's
// incarnation, then each range's first and last number, big endian.
func (o *origin) requestMessage(req request, sent time.Time) []byte {
	hdr := headerLen(o.name)
	msg := make([]byte, hdr+8+requestRangeLen*len(req.ranges))
	o.putHeader(msg, flagRequest, byte(len(req.ranges)), sent)
	binary.BigEndian.PutUint64(msg[hdr:], req.incarnation)
	for i, r := range req.ranges {
		b := msg[hdr+8+requestRangeLen*i:]
		binary.BigEndian.PutUint64(b, r.first)
		binary.BigEndian.PutUint64(b[8:], r.last)
	}
	return o.seal(msg)
}

// summaryMessage is o's summary: a header without records, its stream
// number the last fresh broadcast.
func (o *origin) summaryMessage(sent time.Time) []byte {
	msg := make([]byte, headerLen(o.name))
	o.putHeader(msg, flagSummary, 0, sent)
	return o.seal(msg)
}

// decodeRequest validates a request's body of n ranges. What it accepts is
// exactly what requestMessage writes.
func decodeRequest(body []byte, n int) (request, error) {
	var req request
	if n > maxRequestRanges {
		return req, invalidf("request of %d ranges, more than %d", n, maxRequestRanges)
	}
	if want := 8 + requestRangeLen*n; len(body) != want {
		return req, invalidf("request body of %d bytes, want %d for %d ranges", len(body), want, n)
	}
	req.incarnation = binary.BigEndian.Uint64(body)
	for i := range n {
		b := body[8+requestRangeLen*i:]
		r := seqRange{binary.BigEndian.Uint64(b), binary.BigEndian.Uint64(b[8:])}
		switch {
		case r.first == 0 || r.last < r.first:
			return req, invalidf("request range %d..%d", r.first, r.last)
		case r.last-r.first >= ringSize:
			return req, invalidf("request range %d..%d is longer than %d", r.first, r.last, ringSize)
		case i > 0 && r.first <= req.ranges[i-1].last+1:
			return req, invalidf("request range %d..%d does not follow %d..%d", r.first, r.last, req.ranges[i-1].first, req.ranges[i-1].last)
		}
		req.ranges = append(req.ranges, r)
	}
	return req, nil
}

// sentRing holds the cache entries of a sender's last ringSize fresh
// broadcasts, by stream number. An entry the cache has since removed or
// replaced is recognised as gone by cache.holds.
type sentRing struct {
	slots [ringSize][]entryRef
}

func (r *sentRing) record(stream uint64, entries []entryRef) {
	s := &r.slots[stream%ringSize]
	*s = append((*s)[:0], entries...)
}

// streamState is what a receiver knows of a sender's fresh broadcasts.
type streamState struct {
	started bool
	got     bitRing // stream numbers received and applied
	known   uint64  // highest stream number the sender revealed
	asked   uint64  // numbers up to here have been checked for gaps
	due     uint64  // known at the last check: checked at the next
}

// observe notes what m says about its sender's stream: its stream number,
// and, if m is a fresh broadcast that was applied whole (applied), that it
// arrived.
func (w *window) observe(m message, applied bool) {
	st := &w.stream
	if !st.started {
		st.started = true
		if w.newcomer { // what came before is in the sender's replay to us
			base := m.stream
			if m.flags == 0 {
				base--
			}
			st.asked, st.due = base, base
		}
	}
	st.known = max(st.known, m.stream)
	if applied {
		st.got.take(m.stream)
	}
}

// gaps returns the missing stream numbers that have been known since the
// last check, and moves on; all: too many to list.
func (st *streamState) gaps() (ranges []seqRange, all bool) {
	from, to := st.asked+1, st.due
	st.due = st.known
	if !st.started || to < from {
		return nil, false
	}
	st.asked = to
	if to-from >= windowSize {
		return nil, true
	}
	for n := from; n <= to; n++ {
		got, known := st.got.has(n)
		switch {
		case !known:
			return nil, true
		case got:
		case len(ranges) > 0 && ranges[len(ranges)-1].last == n-1:
			ranges[len(ranges)-1].last = n
		case len(ranges) == maxRequestRanges:
			return nil, true
		default:
			ranges = append(ranges, seqRange{n, n})
		}
	}
	return ranges, false
}

// requestMissing asks each sender for the fresh broadcasts missing for at
// least one gapCheckInterval.
func (e *engine) requestMissing(now time.Time) {
	for name, w := range e.senders.m {
		ranges, all := w.stream.gaps()
		if !all && len(ranges) == 0 {
			continue
		}
		missing := uint64(0)
		for _, r := range ranges {
			missing += r.last - r.first + 1
		}
		e.st.missingMessages.Add(missing)
		e.st.requestsSent.Add(1)
		e.log.Debug("asking for lost relay messages", "peer", name, "messages", missing, "everything", all)
		e.cfg.Transport.SendTo(name, e.self.requestMessage(request{incarnation: w.incarnation, ranges: ranges}, now))
	}
}

// summarize tells every member how far this director's fresh broadcasts
// go.
func (e *engine) summarize(now time.Time) {
	if e.self.stream == 0 {
		return // nothing to lose yet
	}
	e.cfg.Transport.Broadcast(e.self.summaryMessage(now))
	e.st.summariesSent.Add(1)
}

// answer sends a member what its request names: the current records of
// those broadcasts' connections, or the whole cache.
func (e *engine) answer(m message, at time.Time) {
	e.st.requestsReceived.Add(1)
	last, asked := e.lastRequest[m.sender]
	switch {
	case !e.members[m.sender]:
		e.refuseRequest(at, m.sender, "not a member")
		return
	case asked && at.Sub(last) < minRequestGap:
		e.refuseRequest(at, m.sender, "too soon after the last")
		return
	}
	e.lastRequest[m.sender] = at
	req := m.request
	// Numbers of an earlier incarnation of this relay name a cache it no
	// longer has.
	everything := req.incarnation != e.self.incarnation || len(req.ranges) == 0
	for _, r := range req.ranges {
		switch {
		case everything:
		case r.last > e.self.stream:
			e.refuseRequest(at, m.sender, "asks for messages not sent")
			return
		case r.first+ringSize <= e.self.stream:
			everything = true // out of the ring
		}
	}
	if everything {
		if e.findReplay(m.sender) < 0 {
			e.st.fallbackReplays.Add(1)
			e.startReplay(m.sender, at)
		}
		return
	}
	e.resend(m.sender, req.ranges, at)
}

// resend queues the entries of the broadcasts in ranges for member, once
// each, behind those already queued for it.
func (e *engine) resend(member string, ranges []seqRange, now time.Time) {
	if e.findReplay(member) >= 0 {
		return // the whole cache is on its way
	}
	rp := e.findResend(member)
	if rp == nil {
		rp = &replay{to: member, resend: true, started: e.mono(now)}
		e.replays = append(e.replays, rp)
	}
	queued := make(map[entryRef]bool, len(rp.entries))
	for _, en := range rp.entries {
		queued[en] = true
	}
	for _, r := range ranges {
		for n := r.first; n <= r.last; n++ {
			for _, en := range e.ring.slots[n%ringSize] {
				if !queued[en] {
					queued[en] = true
					rp.entries = append(rp.entries, en)
				}
			}
		}
	}
}

func (e *engine) refuseRequest(at time.Time, sender, why string) {
	e.st.requestsRefused.Add(1)
	e.logFirst(at, "request", sender, "refused a request for lost relay messages", "peer", sender, "why", why)
}
