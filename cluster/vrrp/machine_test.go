package vrrp

import (
	"net/netip"
	"testing"
	"time"
)

// step is one event of a machine test and what must follow.
type step struct {
	at   time.Duration // since t0
	ev   string        // "start", "tick", "recv", "shutdown"
	from string        // recv: the sender's address
	prio uint8         // recv: the advertised priority
	intv uint16        // recv: the advertised interval (0: 10 cs)

	state    State
	sends    int           // -1: nothing sent; else the priority sent
	deadline time.Duration // since t0; -1: not checked
}

const (
	none     = -1
	anyTime  = -1
	me       = "10.0.0.11"
	lower    = "10.0.0.5"
	higherIP = "10.0.0.20"
)

// With priority 100 and 10 cs: Skew_Time = 156/256 × 100 ms = 60.9375 ms,
// Master_Down_Interval = 360.9375 ms.
const (
	skew100 = 60937500 * time.Nanosecond
	down100 = 300*time.Millisecond + skew100
)

func TestMachine(t *testing.T) {
	tests := []struct {
		name    string
		preempt bool
		steps   []step
	}{
		{"starts as backup, master when nobody advertises for Master_Down_Interval", true, []step{
			{at: 0, ev: "start", state: Backup, sends: none, deadline: down100},
			{at: down100 - time.Millisecond, ev: "tick", state: Backup, sends: none, deadline: down100},
			{at: down100, ev: "tick", state: Master, sends: 100, deadline: down100 + 100*time.Millisecond},
			{at: down100 + 50*time.Millisecond, ev: "tick", state: Master, sends: none, deadline: down100 + 100*time.Millisecond},
			{at: down100 + 100*time.Millisecond, ev: "tick", state: Master, sends: 100, deadline: down100 + 200*time.Millisecond},
		}},
		{"a higher master's advertisements keep a backup backup and teach it the master's interval", true, []step{
			{at: 0, ev: "start", state: Backup, sends: none, deadline: down100},
			{at: 200 * time.Millisecond, ev: "recv", from: lower, prio: 150, intv: 100, state: Backup, sends: none,
				// 3 × 1 s + 156/256 × 1 s
				deadline: 200*time.Millisecond + 3*time.Second + 609375*time.Microsecond},
		}},
		{"preempt: a lower master is ignored, and taken over from", true, []step{
			{at: 0, ev: "start", state: Backup, sends: none, deadline: down100},
			{at: 100 * time.Millisecond, ev: "recv", from: higherIP, prio: 50, state: Backup, sends: none, deadline: down100},
			{at: down100, ev: "tick", state: Master, sends: 100, deadline: anyTime},
		}},
		{"no preempt: a lower master keeps its place", false, []step{
			{at: 0, ev: "start", state: Backup, sends: none, deadline: down100},
			{at: 100 * time.Millisecond, ev: "recv", from: higherIP, prio: 50, state: Backup, sends: none,
				deadline: 100*time.Millisecond + down100},
		}},
		{"equal priority as backup: the master keeps its place", true, []step{
			{at: 0, ev: "start", state: Backup, sends: none, deadline: down100},
			{at: 100 * time.Millisecond, ev: "recv", from: lower, prio: 100, state: Backup, sends: none,
				deadline: 100*time.Millisecond + down100},
		}},
		{"priority 0: the master stops, the backup takes over after Skew_Time", true, []step{
			{at: 0, ev: "start", state: Backup, sends: none, deadline: down100},
			{at: 100 * time.Millisecond, ev: "recv", from: lower, prio: 150, state: Backup, sends: none, deadline: anyTime},
			{at: 200 * time.Millisecond, ev: "recv", from: lower, prio: 0, state: Backup, sends: none, deadline: 200*time.Millisecond + skew100},
			{at: 200*time.Millisecond + skew100, ev: "tick", state: Master, sends: 100, deadline: anyTime},
		}},
		{"a master yields to a higher priority", true, []step{
			{at: 0, ev: "start", state: Backup, sends: none, deadline: anyTime},
			{at: down100, ev: "tick", state: Master, sends: 100, deadline: anyTime},
			{at: time.Second, ev: "recv", from: lower, prio: 101, state: Backup, sends: none, deadline: time.Second + down100},
		}},
		{"a master yields to an equal priority from a greater address", true, []step{
			{at: 0, ev: "start", state: Backup, sends: none, deadline: anyTime},
			{at: down100, ev: "tick", state: Master, sends: 100, deadline: anyTime},
			{at: time.Second, ev: "recv", from: higherIP, prio: 100, state: Backup, sends: none, deadline: anyTime},
		}},
		{"a master keeps its place against an equal priority from a smaller address, or a lower one", true, []step{
			{at: 0, ev: "start", state: Backup, sends: none, deadline: anyTime},
			{at: down100, ev: "tick", state: Master, sends: 100, deadline: down100 + 100*time.Millisecond},
			{at: time.Second, ev: "recv", from: lower, prio: 100, state: Master, sends: none, deadline: down100 + 100*time.Millisecond},
			{at: time.Second, ev: "recv", from: higherIP, prio: 99, state: Master, sends: none, deadline: down100 + 100*time.Millisecond},
		}},
		{"a master answers another's priority 0 at once", true, []step{
			{at: 0, ev: "start", state: Backup, sends: none, deadline: anyTime},
			{at: down100, ev: "tick", state: Master, sends: 100, deadline: anyTime},
			{at: time.Second, ev: "recv", from: higherIP, prio: 0, state: Master, sends: 100, deadline: time.Second + 100*time.Millisecond},
		}},
		{"a master stops with priority 0", true, []step{
			{at: 0, ev: "start", state: Backup, sends: none, deadline: anyTime},
			{at: down100, ev: "tick", state: Master, sends: 100, deadline: anyTime},
			{at: time.Second, ev: "shutdown", state: Initialize, sends: 0, deadline: 0},
			{at: 2 * time.Second, ev: "tick", state: Initialize, sends: none, deadline: 0},
		}},
		{"a backup stops silently", true, []step{
			{at: 0, ev: "start", state: Backup, sends: none, deadline: anyTime},
			{at: time.Millisecond, ev: "shutdown", state: Initialize, sends: none, deadline: 0},
		}},
	}
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := NewMachine(Params{VRID: 51, Priority: 100, Interval: 10, Preempt: tt.preempt, Primary: netip.MustParseAddr(me)})
			for i, s := range tt.steps {
				now := t0.Add(s.at)
				var sent *Advert
				switch s.ev {
				case "start":
					m.Start(now)
				case "tick":
					sent = m.Tick(now)
				case "shutdown":
					sent = m.Shutdown()
				case "recv":
					intv := s.intv
					if intv == 0 {
						intv = 10
					}
					sent = m.Receive(now, netip.MustParseAddr(s.from), Advert{VRID: 51, Priority: s.prio, Interval: intv})
				}
				if m.State() != s.state {
					t.Fatalf("step %d (%s): state %s, want %s", i, s.ev, m.State(), s.state)
				}
				switch {
				case s.sends == none && sent != nil:
					t.Errorf("step %d (%s): sent priority %d, want nothing", i, s.ev, sent.Priority)
				case s.sends != none && sent == nil:
					t.Errorf("step %d (%s): sent nothing, want priority %d", i, s.ev, s.sends)
				case s.sends != none && int(sent.Priority) != s.sends:
					t.Errorf("step %d (%s): sent priority %d, want %d", i, s.ev, sent.Priority, s.sends)
				}
				if s.deadline == anyTime {
					continue
				}
				want := time.Time{}
				if s.deadline != 0 || s.state != Initialize {
					want = t0.Add(s.deadline)
				}
				if !m.Deadline().Equal(want) {
					t.Errorf("step %d (%s): deadline %v, want %v", i, s.ev, m.Deadline().Sub(t0), s.deadline)
				}
			}
		})
	}
}
