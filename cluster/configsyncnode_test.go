package cluster

import (
	"bytes"
	"slices"
	"testing"
	"time"

	"github.com/lvsd/lvsd/cluster/configsync"
)

type configInbox chan []byte

func (c configInbox) DeliverConfig(msg []byte) {
	select {
	case c <- msg:
	default:
	}
}

// Configuration messages reach the named director both ways: a record
// larger than any packet over a stream, a digest as a packet; the
// heartbeats go on beside them.
func TestNodeSendsConfigMessages(t *testing.T) {
	nodes := startNodes(t, Rules{Mode: ActiveStandby, Preempt: true}, testKey, nil, "a", "b")
	inbox := configInbox(make(chan []byte, 4))
	nodes[1].SetConfigSync(inbox)
	deadline := time.Now().Add(5 * time.Second)
	for !slices.Contains(nodes[0].ConfigPeers(), "b") {
		if time.Now().After(deadline) {
			t.Fatalf("b is not among a's config peers: %v", nodes[0].ConfigPeers())
		}
		time.Sleep(10 * time.Millisecond)
	}
	big := append([]byte{configsync.Magic}, bytes.Repeat([]byte{'x'}, 200_000)...)
	small := []byte{configsync.Magic, configsync.Version, configsync.KindDigest}
	if err := nodes[0].SendConfig("b", big); err != nil {
		t.Fatal(err)
	}
	if err := nodes[0].SendConfigPacket("b", small); err != nil {
		t.Fatal(err)
	}
	got := map[int]bool{} // by length: the stream and the packet race
	for range 2 {
		select {
		case m := <-inbox:
			got[len(m)] = bytes.Equal(m, big) || bytes.Equal(m, small)
		case <-time.After(5 * time.Second):
			t.Fatalf("b got %v, want both messages", got)
		}
	}
	if !got[len(big)] || !got[len(small)] {
		t.Errorf("b got %v (length: intact), want both messages intact", got)
	}
	if err := nodes[0].SendConfig("nobody", small); err == nil {
		t.Error("sent to a director never heard")
	}
}
