package cluster

import (
	"context"
	"maps"
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
