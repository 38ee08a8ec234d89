package cluster

import (
	"bytes"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestSyncMessageOnTheWire: a full connection-sync message (the relay's
// 1,100 bytes) through memberlist with encryption and the longest label
// lvsd accepts (64 bytes) is one UDP datagram that fits an Ethernet MTU
// without fragments, and costs what docs/ecmp.md ("What connection sync
// costs") says: memberlist's framing on top of the message.
func TestSyncMessageOnTheWire(t *testing.T) {
	label := strings.Repeat("l", 64)
	var trs []*cutTransport
	var peers []string
	for range 2 {
		tr := newCutTransport(t)
		trs = append(trs, tr)
		peers = append(peers, "127.0.0.1:"+strconv.Itoa(tr.GetAutoBindPort()))
	}
	var nodes []*Node
	for i, name := range []string{"a", "b"} {
		n, err := Start(Config{Name: name, Rules: Rules{Mode: ECMP}, Bind: peers[i], Peers: peers, Keys: [][]byte{testKey},
			Label: label, HeartbeatInterval: 20 * time.Millisecond, FailureTimeout: 150 * time.Millisecond,
			StartupHold: 100 * time.Millisecond, Transport: trs[i], Log: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = n.Leave(t.Context(), nil) })
		nodes = append(nodes, n)
	}
	ra, rb := &syncRecorder{}, &syncRecorder{}
	nodes[0].SetSync(ra)
	nodes[1].SetSync(rb)
	ra.wait(t, "b joins a's sync peers", func(r *syncRecorder) bool { return r.lastIs("+b", 0) })
	msg := append([]byte{SyncMagic}, bytes.Repeat([]byte{0xa5}, 1099)...)
	trs[0].largest.Store(0)
	nodes[0].SendTo("b", msg)
	rb.wait(t, "the message arrives", func(r *syncRecorder) bool { return len(r.msgs) == 1 })
	wire := int(trs[0].largest.Load())
	overhead := wire - len(msg)
	t.Logf("a %d-byte sync message is a %d-byte UDP payload (memberlist framing, AES-GCM and a %d-byte label: %d bytes)",
		len(msg), wire, len(label), overhead)
	if wire+28 > 1500 {
		t.Errorf("a full sync message is a %d-byte UDP payload: with IPv4 and UDP headers more than a 1,500-byte MTU", wire)
	}
	if !bytes.Equal(rb.msgs[0], msg) {
		t.Error("the message arrived changed")
	}
}
