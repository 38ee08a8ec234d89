package connsync

import (
	"strconv"
	"testing"
	"time"
)

func TestSendersCheck(t *testing.T) {
	s := newSenders(10*time.Second, 2*time.Second)
	msg := func(sender string, inc, seq uint64, sentAgo time.Duration) message {
		return message{sender: sender, incarnation: inc, seq: seq, sent: t0.Add(-sentAgo)}
	}
	steps := []struct {
		name string
		m    message
		want staleness
	}{
		{"first message", msg("b", 5, 10, time.Millisecond), msgFresh},
		{"the same again", msg("b", 5, 10, time.Millisecond), msgReplayed},
		{"newer", msg("b", 5, 12, 0), msgFresh},
		{"older, not seen: memberlist handed it over late", msg("b", 5, 11, 0), msgFresh},
		{"older, seen", msg("b", 5, 11, 0), msgReplayed},
		{"number 0 is never sent", msg("b", 5, 0, 0), msgReplayed},
		{"far ahead", msg("b", 5, 12+2*windowSize, 0), msgFresh},
		{"behind the window", msg("b", 5, 12+windowSize, 0), msgReplayed},
		{"just within the window", msg("b", 5, 13+windowSize, 0), msgFresh},
		{"an earlier incarnation", msg("b", 4, 1<<40, 0), msgReplayed},
		{"a restarted sender starts over", msg("b", 6, 1, 0), msgFresh},
		{"another sender has its own numbers", msg("c", 1, 1, 0), msgFresh},
		{"sent 10 s ago: still taken", msg("c", 1, 2, 10*time.Second), msgFresh},
		{"sent longer ago", msg("c", 1, 3, 10*time.Second+time.Nanosecond), msgTooOld},
		{"sent 2 s in the future: clocks may differ that much", msg("c", 1, 4, -2*time.Second), msgFresh},
		{"further in the future", msg("c", 1, 5, -2*time.Second-time.Nanosecond), msgFuture},
		{"refused for its time: its number is still free", msg("c", 1, 5, 0), msgFresh},
	}
	for _, st := range steps {
		if _, got, detail := s.check(st.m, t0); got != st.want {
			t.Errorf("%s: %d (%s), want %d", st.name, got, detail, st.want)
		}
	}
}

// A ring slot reused by a newer number must not remember the older one.
func TestWindowRing(t *testing.T) {
	var w window
	for seq := uint64(1); seq <= 3*windowSize; seq += 3 {
		if !w.take(seq) {
			t.Fatalf("%d refused", seq)
		}
	}
	for seq := uint64(2*windowSize + 3); seq < 3*windowSize; seq += 3 { // the numbers skipped above
		if !w.take(seq) {
			t.Fatalf("%d, never seen and within the window, refused", seq)
		}
	}
}

func TestSendersBounded(t *testing.T) {
	s := newSenders(10*time.Second, 2*time.Second)
	for i := range maxSenders + 100 {
		now := t0.Add(time.Duration(i) * time.Millisecond)
		s.check(message{sender: "d" + strconv.Itoa(i), incarnation: 1, seq: 1, sent: now}, now)
	}
	if len(s.m) > maxSenders {
		t.Errorf("%d senders remembered, want at most %d", len(s.m), maxSenders)
	}
	// Quiet for MaxAge: forgotten at the next new sender, safely (their
	// messages are too old now).
	later := t0.Add(time.Minute)
	s.check(message{sender: "new", incarnation: 1, seq: 1, sent: later}, later)
	if len(s.m) != 1 {
		t.Errorf("%d senders remembered after a minute of silence, want 1", len(s.m))
	}
}

// TestSendersEarlierIncarnation: a sender restarted with an earlier
// incarnation (its clock went back and its counter was lost) is taken once
// the later incarnation has been silent for MaxAge; until then, and for the
// later incarnation's messages afterwards, it is a replay or too old.
func TestSendersEarlierIncarnation(t *testing.T) {
	const maxAge = 10 * time.Second
	s := newSenders(maxAge, 2*time.Second)
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	msg := func(inc, seq uint64, sent time.Time) message {
		return message{sender: "b", incarnation: inc, seq: seq, sent: sent}
	}
	const later, earlier = 5000, 4000
	steps := []struct {
		name string
		m    message
		now  time.Time
		want staleness
	}{
		{"the later incarnation", msg(later, 1, at(0)), at(0), msgFresh},
		{"its next message", msg(later, 2, at(time.Second)), at(time.Second), msgFresh},
		{"an earlier incarnation while the later one is heard", msg(earlier, 1, at(2*time.Second)), at(2 * time.Second), msgReplayed},
		{"still within MaxAge of the later one's last message", msg(earlier, 2, at(11*time.Second)), at(11 * time.Second), msgReplayed},
		{"the later one silent for longer than MaxAge", msg(earlier, 3, at(11*time.Second+time.Millisecond)), at(11*time.Second + time.Millisecond), msgFresh},
		{"the earlier incarnation goes on", msg(earlier, 4, at(12*time.Second)), at(12 * time.Second), msgFresh},
		{"a replay of the later incarnation's last message", msg(later, 2, at(time.Second)), at(12 * time.Second), msgTooOld},
	}
	for _, st := range steps {
		if _, got, detail := s.check(st.m, st.now); got != st.want {
			t.Errorf("%s: %d (%s), want %d", st.name, got, detail, st.want)
		}
	}
}
