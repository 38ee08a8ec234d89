package agent

import (
	"context"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/lvsd/lvsd/agent/planner"
	"github.com/lvsd/lvsd/ipvs/l4"

	"github.com/lvsd/lvsd/cluster/connsync"
	"github.com/lvsd/lvsd/nat"
)

// Another director's FULLNAT connections become conntrack entries with
// that director's source addresses, closing ones in TIME_WAIT; a
// handshake, a connection not source-NATed here or one of a director
// without addresses for the service (or an unknown one) does not.
func TestPeerEntries(t *testing.T) {
	vip := "192.0.2.10"
	mark := planner.FirewallMark("fullnat" + vip)
	r := peerRules{rs: fullnatRuleset(t, vip), snat: map[uint32]map[string]planner.SNATRange{mark: {
		"d1": {From: netip.MustParseAddr("10.0.0.70"), To: netip.MustParseAddr("10.0.0.71")},
		"d2": {From: netip.MustParseAddr("10.0.0.80"), To: netip.MustParseAddr("10.0.0.80")},
	}}}
	ap := netip.MustParseAddrPort
	conn := func(client, virtual string, state uint16, masq bool) connsync.Conn {
		return connsync.Conn{Protocol: 6, Client: ap(client), Virtual: ap(virtual), Dest: ap("10.0.0.11:7001"),
			Masquerade: masq, State: state, Timeout: 900 * time.Second}
	}
	const established, synRecv, finWait, timeWait, closeWait = 1, 3, 4, 5, 7
	for _, tc := range []struct {
		name    string
		sender  string
		conn    connsync.Conn
		want    bool
		closing bool
	}{
		{"established", "d2", conn("198.51.100.1:40000", vip+":7001", established, true), true, false},
		{"fin_wait", "d2", conn("198.51.100.1:40001", vip+":7002", finWait, true), true, true},
		{"close_wait", "d2", conn("198.51.100.1:40002", vip+":7001", closeWait, true), true, true},
		{"handshake", "d2", conn("198.51.100.1:40003", vip+":7001", synRecv, true), false, false},
		{"time_wait", "d2", conn("198.51.100.1:40004", vip+":7001", timeWait, true), true, true},
		{"direct routing", "d2", conn("198.51.100.1:40005", vip+":7001", established, false), false, false},
		{"port not fullnat", "d2", conn("198.51.100.1:40006", vip+":80", established, true), false, false},
		{"other vip", "d2", conn("198.51.100.1:40007", "192.0.2.11:7001", established, true), false, false},
		{"origin unknown", "", conn("198.51.100.1:40009", vip+":7001", established, true), false, false},
		{"origin without addresses", "d3", conn("198.51.100.1:40008", vip+":7001", established, true), false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := tc.conn
			c.Origin = tc.sender
			got := peerEntries(r, []connsync.Conn{c}).entries
			if !tc.want {
				if len(got) != 0 {
					t.Fatalf("entries %v, want none", got)
				}
				return
			}
			want := nat.ConntrackEntry{Protocol: l4.TCP, Client: tc.conn.Client, VIP: tc.conn.Virtual, Backend: tc.conn.Dest,
				SNATFrom: netip.MustParseAddr("10.0.0.80"), SNATTo: netip.MustParseAddr("10.0.0.80"), Mark: mark, Timeout: 900 * time.Second, Refresh: true, Closing: tc.closing}
			if len(got) != 1 || got[0] != want {
				t.Fatalf("entries %v, want [%v]", got, want)
			}
		})
	}
}

// PeerFlows writes what the relay hands it, what came before the first
// pass gave it the rules included (a joining director gets the others'
// connections replayed first), and nothing once the rules say there is
// no FULLNAT under ECMP.
func TestPeerFlowsWriteWhatTheRelayApplied(t *testing.T) {
	vip := "192.0.2.10"
	mark := planner.FirewallMark("fullnat" + vip)
	ct := &nat.ConntrackFake{}
	p := NewPeerFlows(ct, nil, 25, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go p.Run(ctx)
	c := connsync.Conn{Protocol: 6, Client: netip.MustParseAddrPort("198.51.100.1:40000"), Virtual: netip.MustParseAddrPort(vip + ":7001"),
		Dest: netip.MustParseAddrPort("10.0.0.11:7001"), Masquerade: true, State: 1, Origin: "d2"}
	early := c
	early.Client = netip.MustParseAddrPort("198.51.100.1:39999")
	p.Applied([]connsync.Conn{early}) // before the first pass
	d := planner.Desired{NAT: fullnatRuleset(t, vip), PeerSNAT: map[uint32]map[string]planner.SNATRange{mark: {
		"d2": {From: netip.MustParseAddr("10.0.0.80"), To: netip.MustParseAddr("10.0.0.80")}}}}
	p.SetRules(d)
	p.Applied([]connsync.Conn{c})
	p.Applied([]connsync.Conn{c})
	reused := c // the client's next connection on the same ports, to another backend
	reused.Dest = netip.MustParseAddrPort("10.0.0.12:7001")
	p.Applied([]connsync.Conn{reused})
	deadline := time.Now().Add(5 * time.Second)
	for p.Stats() != (PeerFlowStats{Created: 2, Existing: 2, Refreshed: 1, Replaced: 1, Live: 2}) {
		if time.Now().After(deadline) {
			t.Fatalf("stats %+v, want two created, two existing: one refreshed, one replaced", p.Stats())
		}
		time.Sleep(time.Millisecond)
	}
	entries := ct.Entries()
	if len(entries) != 2 || entries[0].SNATFrom != netip.MustParseAddr("10.0.0.80") || entries[1].SNATFrom != entries[0].SNATFrom ||
		!slices.ContainsFunc(entries, func(e nat.ConntrackEntry) bool { return e.Backend == reused.Dest }) {
		t.Fatalf("entries %v", entries)
	}
	p.SetRules(planner.Desired{NAT: d.NAT})
	c.Client = netip.MustParseAddrPort("198.51.100.1:40001")
	p.Applied([]connsync.Conn{c})
	time.Sleep(20 * time.Millisecond)
	if got := ct.Entries(); !slices.Equal(got, entries) {
		t.Errorf("entries %v after the rules went", got)
	}
}
