package connsync

import (
	"fmt"
	"time"
)

// The cluster key authenticates a relay message but does not stop anyone on
// the path from sending a captured one again. A receiver therefore takes a
// message only if it is fresh:
//
//   - sent at most MaxAge ago and at most MaxClockSkew in the future, by the
//     receiver's clock (so a receiver that restarted, and remembers nothing,
//     is open to replays of at most MaxAge);
//   - and not seen before: each sender numbers its messages per incarnation
//     of its relay, and the receiver keeps a window of the last windowSize
//     numbers per sender, as IPsec does, because memberlist hands queued
//     messages over newest first: a strict "newer than the last" would drop
//     most of a burst.
//
// A sender's incarnation normally grows with every start (the director keeps
// a counter in its state directory). A lower one than the receiver has seen
// is a replay while the incarnation seen is heard; once that one has sent
// nothing for MaxAge, by the receiver's clock, the lower one is a restart
// whose clock went back (or whose counter was lost) and is taken: nothing
// the earlier process sent can still be taken then, as every message of it
// is older than MaxAge. Without this a director restarted with an earlier
// incarnation would be refused until every peer restarted.

// maxIncarnationSkew is how far ahead of the receiver's clock a sender's
// incarnation may be: incarnations are the clock in nanoseconds at start,
// or one more than the last (agent/director/incarnation.go).
const maxIncarnationSkew = 24 * time.Hour

// windowSize is how far behind the newest message from a sender an older
// one may arrive; memberlist queues at most 1024 messages.
const windowSize = 4096

// Limits on the senders remembered: beyond softSenders, those whose newest
// message is older than MaxAge are forgotten (their old messages are
// refused by age anyway); beyond maxSenders, the oldest.
const (
	softSenders = 64
	maxSenders  = 1024
)

// staleness is why a message is refused as not fresh.
type staleness int

const (
	msgFresh    staleness = iota
	msgReplayed           // seen already, from an older incarnation, or too far behind
	msgTooOld             // sent more than MaxAge ago
	msgFuture             // sent more than MaxClockSkew ahead of this director's clock
)

// window is what a receiver remembers of one sender: its messages by
// sequence number, and its fresh broadcasts by stream number (stream).
type window struct {
	incarnation uint64
	bitRing                 // sequence numbers taken
	newest      time.Time   // latest send time taken
	heard       time.Time   // when a message was last taken, by the receiver's clock
	stream      streamState // antientropy.go
	// newcomer: the sender was first heard in this incarnation, so its
	// earlier fresh broadcasts came before this director listened and its
	// replay to this director carries them (antientropy.go).
	newcomer bool
}

// bitRing remembers which of the last windowSize numbers were taken.
type bitRing struct {
	top  uint64                  // highest number taken
	seen [windowSize / 64]uint64 // bit i of the ring: top - i taken
}

// senders keeps a window per sender. Only the Run goroutine uses it.
type senders struct {
	maxAge, skew time.Duration
	m            map[string]*window
}

func newSenders(maxAge, skew time.Duration) *senders {
	return &senders{maxAge: maxAge, skew: skew, m: map[string]*window{}}
}

// check decides whether m, received at now, is fresh, and remembers it if
// so, returning the sender's window. detail explains a refusal.
func (s *senders) check(m message, now time.Time) (w *window, why staleness, detail string) {
	age := now.Sub(m.sent)
	switch {
	case age > s.maxAge:
		return nil, msgTooOld, fmt.Sprintf("sent %v ago, more than %v", age.Round(time.Millisecond), s.maxAge)
	case -age > s.skew:
		return nil, msgFuture, fmt.Sprintf("sent %v in the future by this director's clock, more than %v", (-age).Round(time.Millisecond), s.skew)
	case m.incarnation > uint64(now.Add(maxIncarnationSkew).UnixNano()):
		// It would outrank every real incarnation of the sender for MaxAge.
		return nil, msgFuture, fmt.Sprintf("incarnation %d is more than %v ahead of this director's clock", m.incarnation, maxIncarnationSkew)
	}
	w = s.m[m.sender]
	switch {
	case w == nil:
		s.prune(now)
		w = &window{}
		s.m[m.sender] = w
		w.reset(m.incarnation)
		w.newcomer = true
	case m.incarnation < w.incarnation && now.Sub(w.heard) <= s.maxAge:
		return nil, msgReplayed, fmt.Sprintf("from an earlier incarnation of the sender, which is taken once the later one has been silent for %v", s.maxAge)
	case m.incarnation != w.incarnation:
		w.reset(m.incarnation)
	}
	if !w.take(m.seq) {
		return nil, msgReplayed, fmt.Sprintf("sequence number %d seen already or too old (newest %d)", m.seq, w.top)
	}
	w.heard = now
	if m.sent.After(w.newest) {
		w.newest = m.sent
	}
	return w, msgFresh, ""
}

func (w *window) reset(incarnation uint64) { *w = window{incarnation: incarnation} }

// take marks seq as seen and reports whether it was new and within the
// window.
func (w *bitRing) take(seq uint64) bool {
	if seq == 0 {
		return false // senders number from 1
	}
	if seq > w.top {
		shift := seq - w.top
		if shift >= windowSize {
			w.seen = [windowSize / 64]uint64{}
		} else {
			for i := w.top + 1; i <= seq; i++ {
				w.clear(i)
			}
		}
		w.top = seq
	} else if w.top-seq >= windowSize {
		return false
	}
	word, bit := (seq%windowSize)/64, seq%64
	if w.seen[word]&(1<<bit) != 0 {
		return false
	}
	w.seen[word] |= 1 << bit
	return true
}

// has reports whether seq was taken; known is false if seq is too far
// behind the newest number to tell.
func (w *bitRing) has(seq uint64) (taken, known bool) {
	switch {
	case seq > w.top:
		return false, true
	case w.top-seq >= windowSize:
		return false, false
	}
	return w.seen[(seq%windowSize)/64]&(1<<(seq%64)) != 0, true
}

// clear forgets the ring slot seq takes over from seq - windowSize.
func (w *bitRing) clear(seq uint64) { w.seen[(seq%windowSize)/64] &^= 1 << (seq % 64) }

// prune makes room for a new sender.
func (s *senders) prune(now time.Time) {
	if len(s.m) < softSenders {
		return
	}
	for name, w := range s.m {
		if now.Sub(w.newest) > s.maxAge {
			delete(s.m, name)
		}
	}
	for len(s.m) >= maxSenders {
		oldest := ""
		for name, w := range s.m {
			if oldest == "" || w.newest.Before(s.m[oldest].newest) {
				oldest = name
			}
		}
		delete(s.m, oldest)
	}
}
