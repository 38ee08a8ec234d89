package agent

import (
	"context"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/lvsd/lvsd/agent/planner"
	"github.com/lvsd/lvsd/arp/sysctl"
	"github.com/lvsd/lvsd/cluster/connsync"
	"github.com/lvsd/lvsd/ipvs/l4"
	"github.com/lvsd/lvsd/nat"
)

// budgetEntry is a UDP entry from client port port.
func budgetEntry(port uint16) nat.ConntrackEntry {
	return nat.ConntrackEntry{Protocol: l4.UDP, Client: netip.AddrPortFrom(netip.MustParseAddr("198.51.100.1"), port),
		VIP: netip.MustParseAddrPort("192.0.2.10:53"), Timeout: 5 * time.Minute, CreateTimeout: peerUDPFirstTimeout}
}

// The budget admits entries up to its share of nf_conntrack_max, and each
// origin up to its part of that; what a batch creates counts, what it only
// found does not.
func TestPeerBudgetCaps(t *testing.T) {
	for _, tc := range []struct {
		name         string
		max, share   int
		peers        int
		batch        []string // origin of each entry
		outcome      nat.RestoreOutcome
		wantAdmitted int
		wantLive     int
	}{
		{"under the cap", 1000, 25, 2, []string{"d2", "d3", "d2"}, nat.OutcomeCreated, 3, 3},
		{"one origin takes its part only", 1000, 25, 2, repeat("d2", 200), nat.OutcomeCreated, 125, 125},
		{"two origins take the whole cap", 1000, 25, 2, append(repeat("d2", 200), repeat("d3", 200)...), nat.OutcomeCreated, 250, 250},
		{"one peer takes it all", 1000, 10, 1, repeat("d2", 200), nat.OutcomeCreated, 100, 100},
		{"found, not created: not counted", 1000, 25, 2, repeat("d2", 10), nat.OutcomeExisting, 10, 0},
		{"failed: not counted", 1000, 25, 2, repeat("d2", 10), nat.OutcomeFailed, 10, 0},
		{"table size unknown: no cap", 0, 25, 2, repeat("d2", 500), nat.OutcomeCreated, 500, 500},
		{"tiny table: one", 3, 25, 2, repeat("d2", 5), nat.OutcomeCreated, 1, 1},
		{"small table: one each at least", 8, 25, 2, repeat("d2", 5), nat.OutcomeCreated, 1, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := newPeerBudget(tc.share)
			b.setLimits(tc.max, tc.peers)
			now := time.Unix(1_000_000, 0)
			b.advance(now)
			var entries []nat.ConntrackEntry
			var outcomes []nat.RestoreOutcome
			admitted := 0
			for i, origin := range tc.batch {
				e := budgetEntry(uint16(1000 + i))
				if b.admit(origin) {
					admitted++
					outcomes = append(outcomes, tc.outcome)
				} else {
					e.NoCreate = true
					outcomes = append(outcomes, nat.OutcomeAbsent)
				}
				entries = append(entries, e)
			}
			b.settle(now, entries, tc.batch, outcomes)
			live, _ := b.count()
			if admitted != tc.wantAdmitted || live != tc.wantLive {
				t.Errorf("admitted %d, live %d; want %d, %d", admitted, live, tc.wantAdmitted, tc.wantLive)
			}
		})
	}
}

func repeat(s string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = s
	}
	return out
}

// An entry is counted for the lifetime it was created with, or a refresh
// gave it, and no longer; a refresh of an entry it does not count (a
// local flow's, an uncounted one's) changes nothing.
func TestPeerBudgetExpiry(t *testing.T) {
	start := time.Unix(2_000_000, 0)
	udp := budgetEntry(1000) // created for 30 s
	tcp := budgetEntry(1001) // created for 15 min at most
	tcp.Protocol, tcp.CreateTimeout, tcp.Timeout = l4.TCP, 0, time.Hour
	for _, tc := range []struct {
		name    string
		refresh time.Duration // after start; 0: none
		at      time.Duration // when to count
		want    int
	}{
		{"both at first", 0, time.Second, 2},
		{"udp gone after its first lifetime", 0, 31 * time.Second, 1},
		{"tcp capped at 15 min", 0, 15*time.Minute + time.Second, 0},
		{"tcp alive before its cap", 0, 14 * time.Minute, 1},
		{"udp refreshed lives its record's timeout", 20 * time.Second, 4 * time.Minute, 2},
		{"refreshed udp gone after", 20 * time.Second, 20*time.Second + 5*time.Minute + time.Second, 1},
		{"a day later, none", 0, 24 * time.Hour, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := newPeerBudget(25)
			b.setLimits(1000, 1)
			b.advance(start)
			for range []nat.ConntrackEntry{udp, tcp} {
				if !b.admit("d2") {
					t.Fatal("not admitted")
				}
			}
			b.settle(start, []nat.ConntrackEntry{udp, tcp}, []string{"d2", "d2"}, []nat.RestoreOutcome{nat.OutcomeCreated, nat.OutcomeCreated})
			if tc.refresh > 0 {
				b.advance(start.Add(tc.refresh))
				local := budgetEntry(2000)
				b.settle(start.Add(tc.refresh), []nat.ConntrackEntry{udp, local}, []string{"d2", "d2"},
					[]nat.RestoreOutcome{nat.OutcomeRefreshed, nat.OutcomeRefreshed})
			}
			b.advance(start.Add(tc.at))
			if live, _ := b.count(); live != tc.want {
				t.Errorf("%d counted at +%v, want %d", live, tc.at, tc.want)
			}
			if n := b.byOrigin["d2"]; n != tc.want {
				t.Errorf("%d counted for d2, want %d", n, tc.want)
			}
		})
	}
}

// Room freed by expiry is given again.
func TestPeerBudgetRoomComesBack(t *testing.T) {
	b := newPeerBudget(10)
	b.setLimits(100, 1) // 10 entries
	now := time.Unix(3_000_000, 0)
	for round := range 3 {
		b.advance(now)
		var entries []nat.ConntrackEntry
		var outcomes []nat.RestoreOutcome
		for i := range 15 {
			e := budgetEntry(uint16(round*100 + i))
			o := nat.OutcomeCreated
			if !b.admit("d2") {
				e.NoCreate, o = true, nat.OutcomeAbsent
			}
			entries, outcomes = append(entries, e), append(outcomes, o)
		}
		b.settle(now, entries, repeat("d2", 15), outcomes)
		if live, _ := b.count(); live != 10 {
			t.Fatalf("round %d: %d counted, want 10", round, live)
		}
		now = now.Add(peerUDPFirstTimeout + time.Second)
	}
}

// A flood of records from one director creates its part of the budget and
// is refused beyond, while records of connections whose entries exist
// still refresh them; the counters say so.
func TestPeerFlowsBudget(t *testing.T) {
	vip := "192.0.2.10"
	mark := planner.FirewallMark("fullnat" + vip)
	ct := &nat.ConntrackFake{}
	sys := sysctl.NewFake(map[string]string{sysctlConntrackMax: "1600", sysctlConntrackCount: "42"})
	p := NewPeerFlows(ct, sys, 25, nil) // 400, 200 for each of two peers
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go p.Run(ctx)
	snat := map[string]planner.SNATRange{}
	for i, name := range []string{"d1", "d2", "d3"} {
		a := netip.AddrFrom4([4]byte{10, 0, 0, byte(70 + i)})
		snat[name] = planner.SNATRange{From: a, To: a}
	}
	spec := nat.Spec{SNAT: []nat.SNATRule{{
		Match:  nat.Match{VIP: netip.MustParseAddr(vip), Protocol: l4.UDP, Ports: []l4.PortRange{{From: 7001, To: 7001}}},
		CtMark: mark, Comment: "fullnat " + vip, To: []netip.Addr{netip.MustParseAddr("10.0.0.70")},
	}}}
	rs, err := nat.Render(spec)
	if err != nil {
		t.Fatal(err)
	}
	p.SetRules(planner.Desired{NAT: rs, PeerSNAT: map[uint32]map[string]planner.SNATRange{mark: snat}})
	conn := func(origin string, port int) connsync.Conn {
		return connsync.Conn{Protocol: 17, Client: netip.MustParseAddrPort(fmt.Sprintf("198.51.100.%d:%d", 1+port/60000, 1024+port%60000)),
			Virtual: netip.MustParseAddrPort(vip + ":7001"), Dest: netip.MustParseAddrPort("10.0.0.11:7001"), Masquerade: true,
			Origin: origin, Timeout: 5 * time.Minute}
	}
	var flood []connsync.Conn
	for i := range 1000 {
		flood = append(flood, conn("d2", i))
	}
	for start := 0; start < len(flood); start += 100 {
		p.Applied(flood[start : start+100])
	}
	waitStats(t, p, func(s PeerFlowStats) bool { return s.Created == 200 && s.RefusedBudget == 800 })
	// The other peer still has its part.
	p.Applied([]connsync.Conn{conn("d3", 5000), conn("d3", 5001)})
	// A second record of a connection with an entry refreshes it.
	again := flood[:3]
	p.Applied(again)
	s := waitStats(t, p, func(s PeerFlowStats) bool { return s.Created == 202 && s.Refreshed == 3 })
	if s.RefusedBudget != 800 || s.Limit != 400 || s.ConntrackMax != 1600 || s.ConntrackEntries != 42 {
		t.Errorf("stats %+v, want 800 refused, limit 400 of 1600, 42 in the table", s)
	}
	if s.Live != 202 {
		t.Errorf("%d entries counted, want 202", s.Live)
	}
	for _, e := range ct.Entries() {
		if e.CreateTimeout != peerUDPFirstTimeout || e.NoCreate {
			t.Fatalf("entry %+v, want created for %v", e, peerUDPFirstTimeout)
		}
	}
}

func waitStats(t *testing.T, p *PeerFlows, ok func(PeerFlowStats) bool) PeerFlowStats {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		s := p.Stats()
		if ok(s) {
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("stats %+v", s)
		}
		time.Sleep(time.Millisecond)
	}
}

// A peer-created UDP entry lives peerUDPFirstTimeout until a second
// record; no entry's lifetime passes maxPeerTimeout.
func TestPeerEntryLifetimes(t *testing.T) {
	vip := "192.0.2.10"
	mark := planner.FirewallMark("fullnat" + vip)
	var rules []nat.SNATRule
	for _, proto := range []l4.Protocol{l4.TCP, l4.UDP} {
		rules = append(rules, nat.SNATRule{
			Match:  nat.Match{VIP: netip.MustParseAddr(vip), Protocol: proto, Ports: []l4.PortRange{{From: 7001, To: 7001}}},
			CtMark: mark, Comment: "fullnat " + vip, To: []netip.Addr{netip.MustParseAddr("10.0.0.70")},
		})
	}
	rs, err := nat.Render(nat.Spec{SNAT: rules})
	if err != nil {
		t.Fatal(err)
	}
	a := netip.MustParseAddr("10.0.0.72")
	r := peerRules{rs: rs, snat: map[uint32]map[string]planner.SNATRange{mark: {"d2": {From: a, To: a}}}}
	for _, tc := range []struct {
		name                   string
		proto                  uint8
		record                 time.Duration
		wantTimeout, wantFirst time.Duration
	}{
		{"udp", 17, 5 * time.Minute, 5 * time.Minute, peerUDPFirstTimeout},
		{"udp shorter than the first lifetime", 17, 10 * time.Second, 10 * time.Second, 10 * time.Second},
		{"udp capped", 17, 2 * time.Hour, maxPeerTimeout, peerUDPFirstTimeout},
		{"tcp", 6, 900 * time.Second, 900 * time.Second, 0},
		{"tcp capped", 6, 2 * time.Hour, maxPeerTimeout, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := connsync.Conn{Protocol: tc.proto, Client: netip.MustParseAddrPort("198.51.100.1:40000"),
				Virtual: netip.MustParseAddrPort(vip + ":7001"), Dest: netip.MustParseAddrPort("10.0.0.11:7001"),
				Masquerade: true, State: 1, Origin: "d2", Timeout: tc.record}
			b := peerEntries(r, []connsync.Conn{c})
			if len(b.entries) != 1 || b.origins[0] != "d2" {
				t.Fatalf("batch %+v, want one entry from d2", b)
			}
			if e := b.entries[0]; e.Timeout != tc.wantTimeout || e.CreateTimeout != tc.wantFirst {
				t.Errorf("timeout %v, created with %v; want %v, %v", e.Timeout, e.CreateTimeout, tc.wantTimeout, tc.wantFirst)
			}
		})
	}
}
