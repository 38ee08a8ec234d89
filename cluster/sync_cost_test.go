package cluster

import (
	"bytes"
	"strings"
	"testing"
)

// TestSyncMessageOnTheWire: a full connection-sync message (the relay's
// 1,100 bytes) through memberlist with encryption and the longest label
// lvsd accepts (64 bytes) is one UDP datagram that fits an Ethernet MTU
// without fragments, and costs what docs/ecmp.md ("What connection sync
// costs") says: memberlist's framing on top of the message.
func TestSyncMessageOnTheWire(t *testing.T) {
	label := strings.Repeat("l", 64)
	nodes := startNodesWith(t, func(c *Config) { c.Label = label }, Rules{Mode: ECMP}, testKey, nil, "a", "b")
	ra, rb := &syncRecorder{}, &syncRecorder{}
	nodes[0].SetSync(ra)
	nodes[1].SetSync(rb)
	ra.wait(t, "b joins a's sync peers", func(r *syncRecorder) bool { return r.lastIs("+b", 0) })
	msg := append([]byte{SyncMagic}, bytes.Repeat([]byte{0xa5}, 1099)...)
	nodes[0].tr.largest.Store(0)
	nodes[0].SendTo("b", msg)
	rb.wait(t, "the message arrives", func(r *syncRecorder) bool { return len(r.msgs) == 1 })
	wire := int(nodes[0].tr.largest.Load())
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
