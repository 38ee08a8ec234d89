package bfd

import (
	"testing"
	"time"
)

var t0 = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

const (
	localDiscr  = 0x1111
	remoteDiscr = 0x2222
	ms          = time.Millisecond
)

// step is one event in a session's life: at is the time since t0; exactly
// one of recv, adminDown/adminUp, timers or (nothing:) Advance happens.
type step struct {
	at        time.Duration
	recv      *Packet
	adminDown bool
	adminUp   bool
	timers    *Timers
	// expectations (checked after the event and a following Advance)
	state   State
	diag    Diag
	changed bool
	sent    *sentWant // nil: no packet expected
}

type sentWant struct {
	state       State
	poll, final bool
	desiredTx   time.Duration
	yourDiscr   uint32
}

// remote is a packet from the remote system in state st.
func remote(st State, opts ...func(*Packet)) *Packet {
	p := &Packet{State: st, DetectMult: 3, MyDiscriminator: remoteDiscr, YourDiscriminator: localDiscr,
		DesiredMinTxInterval: 100_000, RequiredMinRxInterval: 100_000}
	if st == Down || st == AdminDown {
		p.YourDiscriminator = 0
	}
	for _, o := range opts {
		o(p)
	}
	return p
}

func withPoll(p *Packet)  { p.Poll = true }
func withFinal(p *Packet) { p.Final = true }
func withTx(us uint32) func(*Packet) {
	return func(p *Packet) { p.DesiredMinTxInterval = us }
}
func withRx(us uint32) func(*Packet) {
	return func(p *Packet) { p.RequiredMinRxInterval = us }
}

// upSteps bring a fresh session Up by the three-way handshake, polling for
// the fast interval; the poll is not answered yet.
var upSteps = []step{
	{at: 0, state: Down, sent: &sentWant{state: Down, desiredTx: time.Second}},
	{at: 10 * ms, recv: remote(Down), state: Init, changed: true,
		sent: &sentWant{state: Init, desiredTx: time.Second, yourDiscr: remoteDiscr}},
	{at: 20 * ms, recv: remote(Up), state: Up, changed: true,
		sent: &sentWant{state: Up, poll: true, desiredTx: 100 * ms, yourDiscr: remoteDiscr}},
}

type sessionCase struct {
	name  string
	steps []step
}

// sessionCases are the state machine's scenarios, each from a fresh
// session at t0 with jitter 0 (packets 75 ms apart at 100 ms).
func sessionCases() []sessionCase {
	upAnswered := append(append([]step{}, upSteps...),
		step{at: 30 * ms, recv: remote(Up, withFinal), state: Up})
	return []sessionCase{
		{"three-way handshake", upSteps},
		{"Down + Init → Up directly", []step{
			{at: 0, state: Down, sent: &sentWant{state: Down, desiredTx: time.Second}},
			{at: 5 * ms, recv: remote(Init), state: Up, changed: true,
				sent: &sentWant{state: Up, poll: true, desiredTx: 100 * ms, yourDiscr: remoteDiscr}},
		}},
		{"Down + Up stays Down", []step{
			{at: 0, state: Down, sent: &sentWant{state: Down, desiredTx: time.Second}},
			{at: 5 * ms, recv: remote(Up), state: Down},
		}},
		{"Init + Init → Up", []step{
			upSteps[0], upSteps[1],
			{at: 30 * ms, recv: remote(Init), state: Up, changed: true,
				sent: &sentWant{state: Up, poll: true, desiredTx: 100 * ms, yourDiscr: remoteDiscr}},
		}},
		{"Up + Down → Down, neighbor signaled", append(append([]step{}, upAnswered...),
			step{at: 40 * ms, recv: remote(Down), state: Down, diag: DiagNeighborDown, changed: true,
				sent: &sentWant{state: Down, desiredTx: time.Second, yourDiscr: remoteDiscr}})},
		{"Up + AdminDown → Down, neighbor signaled", append(append([]step{}, upAnswered...),
			step{at: 40 * ms, recv: remote(AdminDown), state: Down, diag: DiagNeighborDown, changed: true,
				sent: &sentWant{state: Down, desiredTx: time.Second, yourDiscr: remoteDiscr}})},
		{"Down + AdminDown stays Down", []step{
			upSteps[0],
			{at: 5 * ms, recv: remote(AdminDown), state: Down},
		}},
		{"Init + AdminDown → Down", []step{
			upSteps[0], upSteps[1],
			{at: 30 * ms, recv: remote(AdminDown), state: Down, diag: DiagNeighborDown, changed: true,
				sent: &sentWant{state: Down, desiredTx: time.Second, yourDiscr: remoteDiscr}},
		}},
		{"detection time expires in Up", append(append([]step{}, upAnswered...),
			// Last packet at 30 ms; detection 3 × 100 ms → 330 ms. Periodic
			// packets continue meanwhile (jitter 0 → 75 ms apart).
			step{at: 329 * ms, state: Up, sent: &sentWant{state: Up, desiredTx: 100 * ms, yourDiscr: remoteDiscr}},
			step{at: 330 * ms, state: Down, diag: DiagDetectionExpired, changed: true,
				sent: &sentWant{state: Down, desiredTx: time.Second}})},
		{"detection time expires in Init", []step{
			upSteps[0], upSteps[1],
			// Remote Desired Min TX 100 ms, ours Required Min RX 100 ms.
			{at: 310 * ms, state: Down, diag: DiagDetectionExpired, changed: true,
				sent: &sentWant{state: Down, desiredTx: time.Second}},
		}},
		{"detection uses the remote's slower Desired Min TX", []step{
			upSteps[0],
			{at: 10 * ms, recv: remote(Down, withTx(1_000_000)), state: Init, changed: true,
				sent: &sentWant{state: Init, desiredTx: time.Second, yourDiscr: remoteDiscr}},
			{at: 3009 * ms, state: Init, sent: &sentWant{state: Init, desiredTx: time.Second, yourDiscr: remoteDiscr}},
			{at: 3010 * ms, state: Down, diag: DiagDetectionExpired, changed: true,
				sent: &sentWant{state: Down, desiredTx: time.Second}},
		}},
		{"remote poll answered at once with final, never with poll", append(append([]step{}, upSteps...),
			step{at: 25 * ms, recv: remote(Up, withPoll), state: Up,
				sent: &sentWant{state: Up, final: true, desiredTx: 100 * ms, yourDiscr: remoteDiscr}},
			// Our own poll continues on the next periodic packet.
			step{at: 100 * ms, state: Up, sent: &sentWant{state: Up, poll: true, desiredTx: 100 * ms, yourDiscr: remoteDiscr}})},
		{"final ends our poll", append(append([]step{}, upAnswered...),
			step{at: 105 * ms, state: Up, sent: &sentWant{state: Up, desiredTx: 100 * ms, yourDiscr: remoteDiscr}})},
		{"admin down ignores the remote and says why", append(append([]step{}, upAnswered...),
			step{at: 40 * ms, adminDown: true, state: AdminDown, diag: DiagAdminDown, changed: true,
				sent: &sentWant{state: AdminDown, desiredTx: time.Second, yourDiscr: remoteDiscr}},
			step{at: 50 * ms, recv: remote(Up), state: AdminDown, diag: DiagAdminDown},
			// No detection timer in AdminDown.
			step{at: 2000 * ms, state: AdminDown, diag: DiagAdminDown,
				sent: &sentWant{state: AdminDown, desiredTx: time.Second, yourDiscr: remoteDiscr}},
			step{at: 2001 * ms, adminUp: true, state: Down, changed: true,
				sent: &sentWant{state: Down, desiredTx: time.Second, yourDiscr: remoteDiscr}})},
		{"longer interval while Up waits for final", append(append([]step{}, upAnswered...),
			step{at: 40 * ms, timers: &Timers{DesiredMinTx: 300 * ms}, state: Up},
			// Still scheduled on 100 ms (jitter 0: 75 ms) after the last packet at 30 ms.
			step{at: 95 * ms, state: Up, sent: &sentWant{state: Up, poll: true, desiredTx: 300 * ms, yourDiscr: remoteDiscr}},
			step{at: 170 * ms, state: Up, sent: &sentWant{state: Up, poll: true, desiredTx: 300 * ms, yourDiscr: remoteDiscr}},
			step{at: 171 * ms, recv: remote(Up, withFinal), state: Up},
			// Next at 170 + 75 ms as scheduled; then 300 ms × 0.75 apart.
			step{at: 245 * ms, state: Up, sent: &sentWant{state: Up, desiredTx: 300 * ms, yourDiscr: remoteDiscr}},
			step{at: 400 * ms, state: Up},
			step{at: 470 * ms, state: Up, sent: &sentWant{state: Up, desiredTx: 300 * ms, yourDiscr: remoteDiscr}})},
		{"remote Required Min RX 0: no periodic packets", []step{
			upSteps[0],
			{at: 10 * ms, recv: remote(Down, withRx(0)), state: Init, changed: true,
				sent: &sentWant{state: Init, desiredTx: time.Second, yourDiscr: remoteDiscr}},
			{at: 200 * ms, state: Init, sent: nil},
		}},
	}
}

func TestSessionStateMachine(t *testing.T) {
	for _, tc := range sessionCases() {
		t.Run(tc.name, func(t *testing.T) {
			s := NewSession(localDiscr, Timers{}, t0, func() float64 { return 0 })
			for i, st := range tc.steps {
				now := t0.Add(st.at)
				changed := false
				switch {
				case st.recv != nil:
					changed = s.Receive(now, *st.recv)
				case st.adminDown:
					s.SetAdminDown(now, true)
					changed = true
				case st.adminUp:
					s.SetAdminDown(now, false)
					changed = true
				case st.timers != nil:
					s.SetTimers(*st.timers)
				}
				out, ch := s.Advance(now)
				changed = changed || ch
				if s.State() != st.state || s.Status().Diag != st.diag || changed != st.changed {
					t.Fatalf("step %d (%v): state %v diag %v changed %v, want %v %v %v", i, st.at,
						s.State(), s.Status().Diag, changed, st.state, st.diag, st.changed)
				}
				checkSent(t, i, out, st.sent)
			}
		})
	}
}

func checkSent(t *testing.T, i int, got *Packet, want *sentWant) {
	t.Helper()
	if want == nil {
		if got != nil {
			t.Fatalf("step %d: sent %v, want nothing", i, got)
		}
		return
	}
	if got == nil {
		t.Fatalf("step %d: sent nothing, want %+v", i, *want)
	}
	if got.State != want.state || got.Poll != want.poll || got.Final != want.final ||
		duration(got.DesiredMinTxInterval) != want.desiredTx || got.YourDiscriminator != want.yourDiscr ||
		got.MyDiscriminator != localDiscr || got.DetectMult != 3 || got.RequiredMinRxInterval != 100_000 {
		t.Fatalf("step %d: sent %v, want %+v", i, got, *want)
	}
	b := got.Append(nil)
	if _, err := ParsePacket(b); err != nil && got.State != Down && got.State != AdminDown {
		t.Fatalf("step %d: sent packet does not parse: %v", i, err)
	}
}

func TestSessionTimerNegotiation(t *testing.T) {
	cases := []struct {
		name               string
		local              Timers
		remoteTx, remoteRx uint32 // µs
		remoteMult         uint8
		wantTx, wantDetect time.Duration
	}{
		{"defaults both sides", Timers{}, 100_000, 100_000, 3, 100 * ms, 300 * ms},
		{"remote wants slower packets", Timers{}, 100_000, 300_000, 3, 300 * ms, 300 * ms},
		{"remote sends slower", Timers{}, 250_000, 100_000, 3, 100 * ms, 750 * ms},
		{"we accept slower", Timers{RequiredMinRx: 200 * ms}, 100_000, 50_000, 5, 100 * ms, time.Second},
		{"we send faster than asked", Timers{DesiredMinTx: 50 * ms}, 100_000, 20_000, 3, 50 * ms, 300 * ms},
		{"floor of 10 ms", Timers{DesiredMinTx: time.Millisecond, RequiredMinRx: time.Microsecond}, 1, 1, 2,
			10 * ms, 20 * ms},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := NewSession(localDiscr, tc.local, t0, func() float64 { return 0.5 })
			s.Receive(t0, Packet{State: Init, DetectMult: tc.remoteMult, MyDiscriminator: remoteDiscr,
				YourDiscriminator: localDiscr, DesiredMinTxInterval: tc.remoteTx, RequiredMinRxInterval: tc.remoteRx})
			if s.State() != Up {
				t.Fatalf("state %v, want up", s.State())
			}
			if got := s.TxInterval(); got != tc.wantTx {
				t.Errorf("tx interval %v, want %v", got, tc.wantTx)
			}
			if got := s.DetectionTime(); got != tc.wantDetect {
				t.Errorf("detection time %v, want %v", got, tc.wantDetect)
			}
		})
	}
}

func TestSessionJitter(t *testing.T) {
	cases := []struct {
		mult     uint8
		jitter   float64
		min, max time.Duration
	}{
		{3, 0, 75 * ms, 75 * ms},
		{3, 0.999999, 99 * ms, 100 * ms},
		{1, 0, 75 * ms, 75 * ms},
		{1, 0.999999, 89 * ms, 90 * ms}, // §6.8.7: no more than 90 % with a multiplier of 1
	}
	for _, tc := range cases {
		s := NewSession(localDiscr, Timers{DetectMult: tc.mult}, t0, func() float64 { return tc.jitter })
		s.Receive(t0, *remote(Init))
		out, _ := s.Advance(t0)
		if out == nil {
			t.Fatal("no packet at the state change")
		}
		at, immediately, ok := s.Deadline()
		if immediately || !ok {
			t.Fatalf("deadline immediately=%v ok=%v", immediately, ok)
		}
		if d := at.Sub(t0); d < tc.min || d > tc.max {
			t.Errorf("mult %d jitter %v: next packet after %v, want %v..%v", tc.mult, tc.jitter, d, tc.min, tc.max)
		}
	}
}

func TestSessionShorterRequiredMinRxWaitsForFinal(t *testing.T) {
	s := NewSession(localDiscr, Timers{RequiredMinRx: 300 * ms}, t0, func() float64 { return 0 })
	s.Receive(t0, *remote(Init, withFinal))
	s.Receive(t0, *remote(Up, withFinal)) // ends the poll of the Up transition
	if s.DetectionTime() != 900*ms {
		t.Fatalf("detection %v, want 900ms", s.DetectionTime())
	}
	s.SetTimers(Timers{RequiredMinRx: 100 * ms})
	if s.DetectionTime() != 900*ms {
		t.Errorf("detection %v before the final, want still 900ms", s.DetectionTime())
	}
	out, _ := s.Advance(t0.Add(ms))
	if out == nil || !out.Poll || out.RequiredMinRxInterval != 100_000 {
		t.Fatalf("want a poll advertising 100ms, got %v", out)
	}
	s.Receive(t0.Add(2*ms), *remote(Up, withFinal))
	if s.DetectionTime() != 300*ms {
		t.Errorf("detection %v after the final, want 300ms", s.DetectionTime())
	}
}

func TestSessionDetectionResetsRemoteDiscriminatorInDown(t *testing.T) {
	s := NewSession(localDiscr, Timers{}, t0, func() float64 { return 0 })
	s.SetAdminDown(t0, true)
	s.SetAdminDown(t0, false)
	s.Receive(t0, *remote(AdminDown)) // stays Down, learns the discriminator
	if s.Status().RemoteDiscr != remoteDiscr {
		t.Fatal("remote discriminator not learnt")
	}
	if _, changed := s.Advance(t0.Add(300 * ms)); changed {
		t.Fatal("Down changed state on detection expiry")
	}
	if s.Status().RemoteDiscr != 0 {
		t.Error("remote discriminator not reset after a silent detection time")
	}
}
