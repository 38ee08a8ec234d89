package cluster

import (
	"context"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"testing"
	"time"
)

// waitVotes waits until n's view of the votes is want.
func waitVotes(t *testing.T, n *testNode, want Votes) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		got := n.HealthVotes()
		if maps.EqualFunc(got, want, func(a, b map[uint64]bool) bool { return maps.Equal(a, b) }) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s hears the votes %v, want %v", n.cfg.Name, got, want)
		}
		select {
		case <-n.HealthVotesChanged():
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// The health vote rides the heartbeats: a peer hears what a director sees
// down, an abstention, and nothing more from one that failed or left.
func TestHealthVotes(t *testing.T) {
	nodes := startNodes(t, Rules{Mode: ECMP}, testKey, nil, "a", "b", "c")
	a, b, c := nodes[0], nodes[1], nodes[2]
	a.ShareHealth([]uint64{HealthID("web/10.0.0.11:80"), HealthID("web/10.0.0.11:80")})
	b.ShareHealth([]uint64{})
	waitVotes(t, c, Votes{"a": {HealthID("web/10.0.0.11:80"): true}, "b": {}})
	waitVotes(t, a, Votes{"b": {}})
	a.ShareHealth(nil) // abstains
	waitVotes(t, c, Votes{"b": {}})
	a.ShareHealth([]uint64{1, 2})
	waitVotes(t, c, Votes{"a": {1: true, 2: true}, "b": {}})
	b.tr.cut.Store(true) // fails: its vote no longer counts
	waitVotes(t, c, Votes{"a": {1: true, 2: true}})
	if err := a.Leave(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
	waitVotes(t, c, Votes{})
}

// The vote on the wire at 100,000 targets: 1 % down (1,000) and MaxDown
// (2,048) down, in a signed v4 heartbeat. Every heartbeat carries the
// whole vote, so this is paid by every director for every peer at every
// heartbeat interval: the parts and bytes sent, and the time to encode and
// sign them (send), and to decode them and rebuild the peer's vote (hear).
func BenchmarkHealthVoteHeartbeat(b *testing.B) {
	for _, down := range []int{0, 1000, MaxDown} {
		hb := heartbeat{Name: "director-1", Addr: "10.0.0.2:7946", Incarnation: 1, Seq: 2, Ready: true,
			Heard: []uint64{3, 4}, VIPs: []vipClaim{{VIP: netip.MustParseAddr("203.0.113.10"), Held: true}},
			SharesHealth: true}
		for i := range down {
			hb.Down = append(hb.Down, HealthID(fmt.Sprintf("svc%05d/10.0.%d.%d", i, i%10, i%250)))
		}
		slices.Sort(hb.Down)
		parts := hb.encodeAs(hbVersion, fuzzKeys)
		size := 0
		for _, p := range parts {
			size += len(p)
		}
		b.Run(fmt.Sprintf("%d down send", down), func(b *testing.B) {
			b.ReportAllocs()
			for range b.N {
				hb.encodeAs(hbVersion, fuzzKeys)
			}
			b.ReportMetric(float64(len(parts)), "parts")
			b.ReportMetric(float64(size), "bytes")
		})
		b.Run(fmt.Sprintf("%d down hear", down), func(b *testing.B) {
			b.ReportAllocs()
			for range b.N {
				p := &peer{}
				var got *assembled
				for _, raw := range parts {
					d, err := decodeHeartbeat(raw)
					if err != nil {
						b.Fatal(err)
					}
					got = p.assemble(d)
				}
				if got == nil || len(got.health) != down {
					b.Fatalf("heard %v", got)
				}
			}
		})
	}
}
