package vrrp

import (
	"net/netip"
	"time"
)

// State is a state of RFC 5798 section 6.4.
type State int

// The states.
const (
	Initialize State = iota
	Backup
	Master
)

func (s State) String() string {
	switch s {
	case Backup:
		return "backup"
	case Master:
		return "master"
	}
	return "initialize"
}

// Centisecond is the unit of VRRP's intervals.
const Centisecond = 10 * time.Millisecond

// Params are what a virtual router is configured with.
type Params struct {
	VRID     uint8
	Priority uint8 // 1-254: 255 (address owner) is refused by the config
	// Interval is Advertisement_Interval in centiseconds.
	Interval uint16
	// Preempt: a backup with a higher priority than the master takes over
	// (Preempt_Mode, true by default in RFC 5798).
	Preempt bool
	// Primary is this router's primary address on the link, the source of
	// its advertisements; ties of priority go to the greater one.
	Primary netip.Addr
}

// Machine is the state machine of one virtual router. It is pure: every
// event is handed the time, and it returns the advertisement to send, if
// any; its owner arms a timer for Deadline.
type Machine struct {
	p     Params
	state State
	// masterInterval is Master_Adver_Interval: the master's advertised
	// interval, learnt as a backup.
	masterInterval uint16
	// deadline is when the timer of the current state fires: the
	// Master_Down_Timer as backup, the Adver_Timer as master.
	deadline time.Time
	master   netip.Addr // the master as last heard (backup), for the status
}

// NewMachine returns a machine in Initialize.
func NewMachine(p Params) *Machine {
	return &Machine{p: p, masterInterval: p.Interval}
}

// State is the current state.
func (m *Machine) State() State { return m.state }

// Master is the address of the master this backup last heard from.
func (m *Machine) Master() netip.Addr { return m.master }

// Deadline is when Tick must be called next; zero in Initialize.
func (m *Machine) Deadline() time.Time { return m.deadline }

// MasterDownInterval is 3 × Master_Adver_Interval + Skew_Time.
func (m *Machine) MasterDownInterval() time.Duration {
	return 3*cs(m.masterInterval) + m.skew()
}

// skew is Skew_Time: ((256 - Priority) × Master_Adver_Interval) / 256, so
// the backup with the highest priority takes over first.
func (m *Machine) skew() time.Duration {
	return cs(m.masterInterval) * time.Duration(256-int(m.p.Priority)) / 256
}

func cs(n uint16) time.Duration { return time.Duration(n) * Centisecond }

// Start is the Startup event: the router becomes backup and waits a
// Master_Down_Interval for a master (the address owner, which alone
// starts as master, is not supported).
func (m *Machine) Start(now time.Time) {
	if m.state != Initialize {
		return
	}
	m.masterInterval = m.p.Interval
	m.state = Backup
	m.deadline = now.Add(m.MasterDownInterval())
}

// Shutdown is the Shutdown event: a master sends a last advertisement with
// priority 0, so a backup takes over after only its Skew_Time.
func (m *Machine) Shutdown() (send *Advert) {
	was := m.state
	m.state, m.deadline, m.master = Initialize, time.Time{}, netip.Addr{}
	if was == Master {
		return m.advert(0)
	}
	return nil
}

// Tick fires the timer when its deadline has passed: a backup that heard
// no master for Master_Down_Interval becomes master; a master sends its
// periodic advertisement.
func (m *Machine) Tick(now time.Time) (send *Advert) {
	if m.state == Initialize || now.Before(m.deadline) {
		return nil
	}
	if m.state == Backup {
		m.state, m.master = Master, netip.Addr{}
	}
	m.deadline = now.Add(cs(m.p.Interval))
	return m.advert(m.p.Priority)
}

// Receive handles an advertisement from src for this virtual router
// (VRID already matched).
func (m *Machine) Receive(now time.Time, src netip.Addr, a Advert) (send *Advert) {
	switch m.state {
	case Backup:
		if a.Priority == 0 {
			// The master stops: take over after Skew_Time only.
			m.deadline = now.Add(m.skew())
			return nil
		}
		if !m.p.Preempt || a.Priority >= m.p.Priority {
			m.masterInterval, m.master = a.Interval, src
			m.deadline = now.Add(m.MasterDownInterval())
		}
		// else: a lower master, which this router preempts when its
		// Master_Down_Timer fires.
		return nil
	case Master:
		if a.Priority == 0 {
			// Another master stops: make sure the backups hear this one at once.
			m.deadline = now.Add(cs(m.p.Interval))
			return m.advert(m.p.Priority)
		}
		if a.Priority > m.p.Priority || a.Priority == m.p.Priority && src.Compare(m.p.Primary) > 0 {
			m.state, m.masterInterval, m.master = Backup, a.Interval, src
			m.deadline = now.Add(m.MasterDownInterval())
		}
	}
	return nil
}

func (m *Machine) advert(priority uint8) *Advert {
	return &Advert{VRID: m.p.VRID, Priority: priority, Interval: m.p.Interval}
}
