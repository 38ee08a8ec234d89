package bfd

import "time"

// Timers are the local timer parameters of a session (RFC 5880 §6.8.1:
// bfd.DesiredMinTxInterval, bfd.RequiredMinRxInterval, bfd.DetectMult).
// Zero fields take the defaults: 100 ms × 3, the FRR profile the lab
// measured 0.30–0.38 s link-cut detection with.
type Timers struct {
	DesiredMinTx  time.Duration
	RequiredMinRx time.Duration
	DetectMult    uint8
}

// Defaults of Timers.
const (
	DefaultInterval   = 100 * time.Millisecond
	DefaultDetectMult = 3
	// slowTxInterval is the floor of bfd.DesiredMinTxInterval while the
	// session is not Up (RFC 5880 §6.8.3: "MUST be at least one second").
	slowTxInterval = time.Second
	// minInterval keeps a misconfiguration from flooding the link.
	minInterval = 10 * time.Millisecond
)

// WithDefaults fills zero fields and raises intervals below 10 ms to 10 ms.
func (t Timers) WithDefaults() Timers {
	if t.DesiredMinTx == 0 {
		t.DesiredMinTx = DefaultInterval
	}
	if t.RequiredMinRx == 0 {
		t.RequiredMinRx = DefaultInterval
	}
	if t.DetectMult == 0 {
		t.DetectMult = DefaultDetectMult
	}
	t.DesiredMinTx = max(t.DesiredMinTx, minInterval)
	t.RequiredMinRx = max(t.RequiredMinRx, minInterval)
	return t
}

// Session is the state machine of one asynchronous-mode BFD session (RFC
// 5880 §6.8), without I/O and without a clock of its own: the caller passes
// the time to every method, hands it received packets (already parsed with
// ParsePacket and matched to this session) and sends what Advance returns.
// Not safe for concurrent use; one goroutine owns it.
type Session struct {
	timers Timers
	// jitter returns a uniform value in [0, 1) (the transmit jitter of
	// §6.8.7); injected so tests are deterministic.
	jitter func() float64

	state      State
	diag       Diag // bfd.LocalDiag
	localDiscr uint32
	changedAt  time.Time

	remoteDiscr      uint32
	remoteState      State
	remoteDiag       Diag
	remoteMinRx      time.Duration // bfd.RemoteMinRxInterval
	remoteDesiredTx  time.Duration // the remote's last Desired Min TX Interval
	remoteDetectMult uint8
	lastRx           time.Time

	// desiredTx is bfd.DesiredMinTxInterval, what we advertise. txBase is
	// what our schedule uses: it lags desiredTx when the interval grew
	// while Up, until the Poll Sequence ends (§6.8.3). rxBase likewise
	// lags a shortened Required Min RX in our detection time.
	desiredTx time.Duration
	txBase    time.Duration
	rxBase    time.Duration
	polling   bool // a Poll Sequence is in progress: P on every packet
	finalDue  bool // the remote polled: answer with F at once
	sendNow   bool // state changed: tell the remote at once
	nextTx    time.Time
	detectAt  time.Time // zero: no detection timer running
}

// NewSession returns a session in state Down that sends its first packet
// at once. localDiscr must be nonzero and unique among the caller's
// sessions; jitter returns uniform values in [0, 1).
func NewSession(localDiscr uint32, timers Timers, now time.Time, jitter func() float64) *Session {
	timers = timers.WithDefaults()
	s := &Session{
		timers:      timers,
		jitter:      jitter,
		state:       Down,
		localDiscr:  localDiscr,
		changedAt:   now,
		remoteState: Down,
		remoteMinRx: time.Microsecond, // §6.8.1: initialised to 1
		desiredTx:   max(timers.DesiredMinTx, slowTxInterval),
		nextTx:      now,
	}
	s.txBase, s.rxBase = s.desiredTx, timers.RequiredMinRx
	return s
}

// Receive applies a received packet (RFC 5880 §6.8.6 from "Set
// bfd.RemoteDiscr" on) and reports whether the session state changed.
func (s *Session) Receive(now time.Time, p Packet) (changed bool) {
	s.remoteDiscr = p.MyDiscriminator
	s.remoteState = p.State
	s.remoteDiag = p.Diag
	s.remoteMinRx = duration(p.RequiredMinRxInterval)
	s.remoteDesiredTx = duration(p.DesiredMinTxInterval)
	s.remoteDetectMult = p.DetectMult
	s.lastRx = now
	if p.Final && s.polling {
		s.polling = false
		s.txBase, s.rxBase = s.desiredTx, s.timers.RequiredMinRx
	}
	if s.state == AdminDown {
		return false
	}
	before := s.state
	if p.State == AdminDown {
		if s.state != Down {
			s.enter(now, Down, DiagNeighborDown)
		}
	} else {
		switch s.state {
		case Down:
			switch p.State {
			case Down:
				s.enter(now, Init, DiagNone)
			case Init:
				s.enter(now, Up, DiagNone)
			}
		case Init:
			if p.State == Init || p.State == Up {
				s.enter(now, Up, DiagNone)
			}
		case Up:
			if p.State == Down {
				s.enter(now, Down, DiagNeighborDown)
			}
		}
	}
	s.detectAt = now.Add(s.DetectionTime())
	if p.Poll {
		s.finalDue = true
	}
	return s.state != before
}

// Advance runs the timers up to now: the detection timer (the session goes
// Down when it expires in Init or Up) and the transmit schedule. It returns
// the packet to send now, if any, and whether the state changed.
func (s *Session) Advance(now time.Time) (out *Packet, changed bool) {
	if !s.detectAt.IsZero() && !now.Before(s.detectAt) {
		s.detectAt = time.Time{}
		s.remoteDiscr = 0 // §6.8.1: reset when the Detection Time passes silently
		if s.state == Init || s.state == Up {
			s.enter(now, Down, DiagDetectionExpired)
			changed = true
		}
	}
	if !s.txDue(now) {
		return nil, changed
	}
	p := s.packet()
	if s.finalDue {
		// F answers a poll "without respect to the transmission timer",
		// and never together with P (§6.8.7).
		p.Final, s.finalDue = true, false
	} else if s.polling {
		p.Poll = true
	}
	s.sendNow = false
	s.nextTx = now.Add(s.jitteredInterval())
	return &p, changed
}

// Deadline is when Advance has work next; immediately reports that it has
// work now. ok is false when nothing is scheduled (the remote asked for no
// packets and no timer runs).
func (s *Session) Deadline() (at time.Time, immediately, ok bool) {
	if s.sendNow || s.finalDue {
		return time.Time{}, true, true
	}
	if s.periodic() {
		at, ok = s.nextTx, true
	}
	if !s.detectAt.IsZero() && (!ok || s.detectAt.Before(at)) {
		at, ok = s.detectAt, true
	}
	return at, false, ok
}

// SetAdminDown takes the session administratively down (a graceful stop:
// the remote sees AdminDown, which RFC 5882 §3.2 says must not count as a
// failure). SetAdminDown(false) resumes from Down.
func (s *Session) SetAdminDown(now time.Time, down bool) {
	switch {
	case down && s.state != AdminDown:
		s.enter(now, AdminDown, DiagAdminDown)
		s.detectAt = time.Time{}
	case !down && s.state == AdminDown:
		s.enter(now, Down, DiagNone)
	}
}

// SetTimers changes the local timer parameters (a configuration reload).
// While Up, the remote learns them through a Poll Sequence; a shorter
// Required Min RX shortens our detection time only once it ended (§6.8.3).
func (s *Session) SetTimers(t Timers) {
	t = t.WithDefaults()
	if t == s.timers {
		return
	}
	s.timers = t
	if s.state != Up {
		s.slowDown()
		return
	}
	s.rxBase = max(s.rxBase, t.RequiredMinRx)
	s.pollDesiredTx(t.DesiredMinTx)
	s.polling = true // also for a changed Required Min RX or multiplier
}

// enter changes the state, schedules an immediate packet announcing it and
// moves between the slow (not Up) and the configured transmit interval.
func (s *Session) enter(now time.Time, st State, diag Diag) {
	s.state, s.diag, s.changedAt, s.sendNow = st, diag, now, true
	if st == Up {
		s.pollDesiredTx(s.timers.DesiredMinTx)
	} else {
		s.slowDown()
	}
}

// slowDown sets the intervals of a session that is not Up: Desired Min TX
// at least one second, everything in effect at once, no Poll Sequence.
func (s *Session) slowDown() {
	s.desiredTx = max(s.timers.DesiredMinTx, slowTxInterval)
	s.txBase, s.rxBase, s.polling = s.desiredTx, s.timers.RequiredMinRx, false
}

// pollDesiredTx changes Desired Min TX while Up: a Poll Sequence announces
// it, and a longer interval is used only once the sequence ends (§6.8.3).
func (s *Session) pollDesiredTx(d time.Duration) {
	if d == s.desiredTx {
		return
	}
	if d < s.desiredTx {
		s.txBase = d
	}
	s.desiredTx, s.polling = d, true
}

func (s *Session) txDue(now time.Time) bool {
	return s.sendNow || s.finalDue || (s.periodic() && !now.Before(s.nextTx))
}

// periodic: §6.8.7 forbids periodic packets while the remote's Required
// Min RX Interval is zero.
func (s *Session) periodic() bool { return s.remoteMinRx > 0 }

// TxInterval is the negotiated transmit interval before jitter: the larger
// of our Desired Min TX and the remote's Required Min RX (§6.8.7).
func (s *Session) TxInterval() time.Duration { return max(s.txBase, s.remoteMinRx) }

// jitteredInterval is TxInterval less 0–25 % (10–25 % with a detect
// multiplier of 1), as §6.8.7 requires.
func (s *Session) jitteredInterval() time.Duration {
	base := s.TxInterval()
	factor := 0.75 + 0.25*s.jitter()
	if s.timers.DetectMult == 1 {
		factor = 0.75 + 0.15*s.jitter()
	}
	return time.Duration(float64(base) * factor)
}

// DetectionTime is the time without packets after which the session goes
// down (§6.8.4, asynchronous mode): the remote's multiplier times the larger
// of our Required Min RX and the remote's Desired Min TX.
func (s *Session) DetectionTime() time.Duration {
	return time.Duration(s.remoteDetectMult) * max(s.rxBase, s.remoteDesiredTx)
}

// packet is the control packet describing the session now.
func (s *Session) packet() Packet {
	return Packet{
		Diag:                  s.diag,
		State:                 s.state,
		DetectMult:            s.timers.DetectMult,
		MyDiscriminator:       s.localDiscr,
		YourDiscriminator:     s.remoteDiscr,
		DesiredMinTxInterval:  micros(s.desiredTx),
		RequiredMinRxInterval: micros(s.timers.RequiredMinRx),
	}
}

// SessionStatus is a snapshot of a session for status output.
type SessionStatus struct {
	State         State
	Diag          Diag // why it last went down
	Since         time.Time
	RemoteState   State
	RemoteDiag    Diag
	LocalDiscr    uint32
	RemoteDiscr   uint32
	TxInterval    time.Duration // negotiated, before jitter
	DetectionTime time.Duration // 0 until a packet arrived
	LastReceived  time.Time
	Polling       bool
}

// Status returns a snapshot of the session.
func (s *Session) Status() SessionStatus {
	return SessionStatus{
		State: s.state, Diag: s.diag, Since: s.changedAt,
		RemoteState: s.remoteState, RemoteDiag: s.remoteDiag,
		LocalDiscr: s.localDiscr, RemoteDiscr: s.remoteDiscr,
		TxInterval: s.TxInterval(), DetectionTime: s.DetectionTime(),
		LastReceived: s.lastRx, Polling: s.polling,
	}
}

// State is the session's current state.
func (s *Session) State() State { return s.state }
