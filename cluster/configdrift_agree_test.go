package cluster

import (
	"reflect"
	"testing"
	"time"
)

// What the loop publishes of the live peers' configurations: compared
// with the digest this director advertises, published (and signalled)
// only when it changes, without the peers that are not live.
func TestPublishPeerConfigs(t *testing.T) {
	mine := map[string]uint64{"api": 1, "web": 3}
	theirs := map[string]uint64{"api": 1, "web": 30}
	now := time.Unix(1000, 0)
	b := testLoop(t, selfInc)
	b.n.configsChanged = make(chan struct{}, 1)
	signalled := func() bool {
		select {
		case <-b.n.configsChanged:
			return true
		default:
			return false
		}
	}
	b.takeConfig(digestOf(mine))
	a := newSender(t, digestOf(theirs))
	b.onHeartbeat(a.beat(t, b), now)
	a.hear(b)
	b.onHeartbeat(a.beat(t, b), now)
	b.peers["a"].state = peerLive
	b.publishConfigs()
	want := PeerConfigs{Against: digestOf(mine).Sum, Peers: map[string]PeerConfig{
		"a": {Known: true, Compared: true, Differ: map[string]bool{"web": true}}}}
	if got := b.n.PeerConfigs(); !reflect.DeepEqual(got, want) || !signalled() {
		t.Fatalf("published %+v, want %+v (and a signal)", got, want)
	}
	b.publishConfigs()
	if signalled() {
		t.Fatal("signalled again without a change")
	}

	// b loads what a has: the same, against the new digest.
	b.takeConfig(digestOf(theirs))
	if !b.configDirty {
		t.Fatal("a new digest of this director's leaves nothing to publish")
	}
	b.publishConfigs()
	want = PeerConfigs{Against: digestOf(theirs).Sum, Peers: map[string]PeerConfig{"a": {Known: true, Same: true}}}
	if got := b.n.PeerConfigs(); !reflect.DeepEqual(got, want) || !signalled() {
		t.Fatalf("published %+v, want %+v", got, want)
	}

	// A director that advertises nothing is unknown; one not live is left out.
	b.peers["old"] = &peer{name: "old", state: peerLive}
	b.peers["a"].state = peerRising
	b.publishConfigs()
	want = PeerConfigs{Against: digestOf(theirs).Sum, Peers: map[string]PeerConfig{"old": {}}}
	if got := b.n.PeerConfigs(); !reflect.DeepEqual(got, want) {
		t.Fatalf("published %+v, want %+v", got, want)
	}
}
