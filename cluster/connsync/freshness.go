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

// window is what a receiver remembers of one sender.
type window struct {
	incarnation uint64
	top         uint64                  // highest sequence number taken
	seen        [windowSize / 64]uint64 // bit i of the ring: top - i taken
	newest      time.Time               // latest send time taken
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
// so. detail explains a refusal.
func (s *senders) check(m message, now time.Time) (why staleness, detail string) {
	age := now.Sub(m.sent)
	switch {
	case age > s.maxAge:
		return msgTooOld, fmt.Sprintf("sent %v ago, more than %v", age.Round(time.Millisecond), s.maxAge)
	case -age > s.skew:
		return msgFuture, fmt.Sprintf("sent %v in the future by this director's clock, more than %v", (-age).Round(time.Millisecond), s.skew)
	}
	w := s.m[m.sender]
	switch {
	case w == nil:
		s.prune(now)
		w = &window{}
		s.m[m.sender] = w
		w.reset(m.incarnation)
	case m.incarnation < w.incarnation:
		return msgReplayed, "from an earlier incarnation of the sender"
	case m.incarnation > w.incarnation:
		w.reset(m.incarnation)
	}
	if !w.take(m.seq) {
		return msgReplayed, fmt.Sprintf("sequence number %d seen already or too old (newest %d)", m.seq, w.top)
	}
	if m.sent.After(w.newest) {
		w.newest = m.sent
	}
	return msgFresh, ""
}

func (w *window) reset(incarnation uint64) { *w = window{incarnation: incarnation} }

// take marks seq as seen and reports whether it was new and within the
// window.
func (w *window) take(seq uint64) bool {
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

// clear forgets the ring slot seq takes over from seq - windowSize.
func (w *window) clear(seq uint64) { w.seen[(seq%windowSize)/64] &^= 1 << (seq % 64) }

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
