package cluster

import (
	"bytes"
	"context"
	"log/slog"
	"net/netip"
	"slices"
	"sync"
	"testing"
	"time"
)

// syncRecorder is a SyncReceiver that records what it is told.
type syncRecorder struct {
	mu     sync.Mutex
	msgs   [][]byte
	events []string
}

func (r *syncRecorder) Deliver(msg []byte) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.msgs = append(r.msgs, bytes.Clone(msg))
}
func (r *syncRecorder) MemberJoined(name string) { r.event("+" + name) }
func (r *syncRecorder) MemberLeft(name string)   { r.event("-" + name) }
func (r *syncRecorder) event(e string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, e)
}

// lastIs reports whether the last event is e and came after the first
// from events; r.mu is held.
func (r *syncRecorder) lastIs(e string, from int) bool {
	return len(r.events) > from && r.events[len(r.events)-1] == e
}

func (r *syncRecorder) eventCount() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.events)
}

func (r *syncRecorder) wait(t *testing.T, what string, ok func(*syncRecorder) bool) {
	t.Helper()
	for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		r.mu.Lock()
		done := ok(r)
		r.mu.Unlock()
		if done {
			return
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	t.Fatalf("%s: events %v, %d messages", what, r.events, len(r.msgs))
}

// Sync messages travel between nodes (encrypted like the heartbeats) and
// never reach the heartbeat decoder; the receiver learns who joins, leaves
// and restarts.
func TestNodeSync(t *testing.T) {
	nodes := startNodes(t, Rules{Mode: ActiveStandby, Preempt: true}, testKey, []netip.Addr{vip1}, "a", "b")
	ra, rb := &syncRecorder{}, &syncRecorder{}
	nodes[0].SetSync(ra)
	nodes[1].SetSync(rb)
	waitHolders(t, nodes, vip1, 5*time.Second, "a")
	// A loaded host may make a lose b for a moment (-b +b): the test
	// waits for each event after the step that causes it.
	ra.wait(t, "a hears b", func(r *syncRecorder) bool { return r.lastIs("+b", 0) })

	msg := []byte{SyncMagic, 1, 2, 3}
	nodes[0].Broadcast(msg)
	rb.wait(t, "b gets the broadcast", func(r *syncRecorder) bool { return len(r.msgs) == 1 && bytes.Equal(r.msgs[0], msg) })
	nodes[1].SendTo("a", []byte{SyncMagic, 9})
	nodes[1].SendTo("nobody", []byte{SyncMagic, 8})
	ra.wait(t, "a gets b's message", func(r *syncRecorder) bool { return len(r.msgs) == 1 && r.msgs[0][1] == 9 })

	// b restarts under the same name: a new process has no state.
	left := ra.eventCount()
	if err := nodes[1].Leave(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
	ra.wait(t, "a sees b leave", func(r *syncRecorder) bool { return r.lastIs("-b", left) })
	back := ra.eventCount()
	b2, err := Start(Config{Name: "b", Rules: nodes[0].cfg.Rules, Priority: 1, Bind: "127.0.0.1:0",
		Peers: []string{nodes[0].Address()}, Keys: [][]byte{testKey}, Label: "test",
		HeartbeatInterval: 20 * time.Millisecond, FailureTimeout: 150 * time.Millisecond,
		StartupHold: 400 * time.Millisecond, VIPs: []netip.Addr{vip1}, Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer b2.Leave(context.Background(), nil)
	ra.wait(t, "a sees b again", func(r *syncRecorder) bool { return r.lastIs("+b", back) })
	if !nodes[0].Holds(vip1) {
		t.Error("sync traffic moved the VIP")
	}
}

// A receiver set after the node heard its peers is told of them: nothing
// else would announce them to it.
func TestSetSyncAfterPeersHeard(t *testing.T) {
	nodes := startNodes(t, Rules{Mode: ActiveStandby, Preempt: true}, testKey, []netip.Addr{vip1}, "a", "b", "c")
	waitHolders(t, nodes, vip1, 5*time.Second, "a")
	for deadline := time.Now().Add(3 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		nodes[0].mu.Lock()
		heard := len(nodes[0].syncPeers)
		nodes[0].mu.Unlock()
		if heard == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a heard %d peers, want 2", heard)
		}
	}
	r := &syncRecorder{}
	nodes[0].SetSync(r)
	r.wait(t, "a's late receiver told of b and c", func(r *syncRecorder) bool {
		return slices.Contains(r.events, "+b") && slices.Contains(r.events, "+c")
	})
}

// Sync messages that come before the receiver is set are kept for it, in
// order and within bounds, and delivered ahead of later ones; after the
// window nothing is kept.
func TestSyncMessagesBeforeSetSync(t *testing.T) {
	msg := func(i int) []byte { return []byte{SyncMagic, byte(i >> 8), byte(i)} }
	t.Run("kept", func(t *testing.T) {
		n := &Node{started: time.Now()}
		for i := range earlySyncMessages + 10 {
			n.deliverSync(msg(i))
		}
		r := &syncRecorder{}
		n.SetSync(r)
		n.deliverSync(msg(9999))
		if len(r.msgs) != earlySyncMessages+1 {
			t.Fatalf("%d messages delivered, want the first %d kept and the later one", len(r.msgs), earlySyncMessages)
		}
		for i := range earlySyncMessages {
			if !bytes.Equal(r.msgs[i], msg(i)) {
				t.Fatalf("message %d is %v, want %v: out of order", i, r.msgs[i], msg(i))
			}
		}
		if !bytes.Equal(r.msgs[earlySyncMessages], msg(9999)) || n.early.msgs != nil {
			t.Errorf("the later message %v, kept %d: want it last and none kept", r.msgs[earlySyncMessages], len(n.early.msgs))
		}
	})
	t.Run("after the window", func(t *testing.T) {
		n := &Node{started: time.Now().Add(-earlySyncWindow - time.Second)}
		n.deliverSync(msg(1))
		r := &syncRecorder{}
		n.SetSync(r)
		if len(r.msgs) != 0 {
			t.Errorf("%d messages kept past the window", len(r.msgs))
		}
	})
}
