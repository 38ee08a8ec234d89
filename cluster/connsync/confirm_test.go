package connsync

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"
)

// fakeKernel is a backup daemon and the IPVS connection table it fills:
// what is written while it does not run is lost, as in the kernel, and
// lose makes it lose the first writes of some connections (a full socket
// buffer).
type fakeKernel struct {
	mu      sync.Mutex
	running bool
	table   map[ConnID]bool
	lose    map[ConnID]int // connection -> how many of its writes are still to be lost
	readErr error
	reads   int
}

func newFakeKernel(running bool) *fakeKernel {
	return &fakeKernel{running: running, table: map[ConnID]bool{}, lose: map[ConnID]int{}}
}

func (k *fakeKernel) start() {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.running = true
}

func (k *fakeKernel) take(b []byte) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if !k.running {
		return
	}
	_, recs, err := parseDatagram(b)
	if err != nil {
		panic(fmt.Sprintf("the relay wrote an invalid datagram: %v", err))
	}
	for _, r := range recs {
		id := connID(r)
		if k.lose[id] > 0 {
			k.lose[id]--
			continue
		}
		k.table[id] = true
	}
}

func (k *fakeKernel) has(id ConnID) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.table[id]
}

func (k *fakeKernel) BackupRunning(context.Context) (bool, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.running, nil
}

func (k *fakeKernel) EachConnection(_ context.Context, f func(ConnID)) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.reads++
	if k.readErr != nil {
		return k.readErr
	}
	for id := range k.table {
		f(id)
	}
	return nil
}

// startChecked starts a relay named name whose writes go to kernel.
func startChecked(t *testing.T, name string, kernel *fakeKernel) *node {
	t.Helper()
	return startNodeWith(t, name, Config{Kernel: kernel}, func(s *fakeSockets) { s.kernel = kernel })
}

// TestRelayHoldsUntilBackupRuns: b starts before its backup daemon runs.
// a's replay is held, not written into the void; b has not caught up
// until the daemon runs and the kernel's table holds a's connections.
func TestRelayHoldsUntilBackupRuns(t *testing.T) {
	a := startNode(t, "a", Config{})
	conns := []testConn{tcp4("198.51.100.7", 40000), tcp4("198.51.100.8", 40001), tcp6("2001:db8::7", 40002)}
	for _, c := range conns {
		a.socks.master <- datagram(1, c.encode())
	}
	// Cached and broadcast to nobody yet: what b gets is a's replay.
	waitFor(t, func() bool { return a.Stats().SentRecords == uint64(len(conns)) })

	kernel := newFakeKernel(false)
	b := startChecked(t, "b", kernel)
	b.MemberJoined("a")
	connect(a, b)
	a.MemberJoined("b")
	waitFor(t, func() bool { return b.Stats().HeldMessages >= 2 }) // the records and the end marker
	time.Sleep(50 * time.Millisecond)
	if b.CaughtUp() {
		t.Fatal("b caught up while its backup daemon did not run")
	}
	if s := b.Stats(); s.AppliedRecords != 0 || len(b.socks.waitWritten(t, 0)) != 0 {
		t.Fatalf("b wrote to a backup daemon that does not run: %+v", s)
	}

	kernel.start()
	waitFor(t, b.CaughtUp)
	for _, c := range conns {
		if id := connID(c.encode()); !kernel.has(id) {
			t.Errorf("b caught up without %v in its kernel's table", id)
		}
	}
	if s := b.Stats(); s.ConfirmedRecords != uint64(len(conns)) || s.AppliedRecords != uint64(len(conns)) || s.UnconfirmedRecords != 0 {
		t.Fatalf("stats %+v", s)
	}
}

// TestRelayRewritesWhatKernelLacks: the backup daemon runs but loses some
// records (its socket buffer was full). b's catch-up ends only once they
// are written again and in the table.
func TestRelayRewritesWhatKernelLacks(t *testing.T) {
	a := startNode(t, "a", Config{})
	lost, kept := tcp4("198.51.100.7", 40000), tcp4("198.51.100.8", 40001)
	a.socks.master <- datagram(1, lost.encode(), kept.encode())
	waitFor(t, func() bool { return a.Stats().SentRecords == 2 })

	kernel := newFakeKernel(true)
	kernel.lose[connID(lost.encode())] = 2 // the replay's and the first retry's
	b := startChecked(t, "b", kernel)
	b.MemberJoined("a")
	connect(a, b)
	a.MemberJoined("b")
	waitFor(t, b.CaughtUp)
	if !kernel.has(connID(lost.encode())) {
		t.Fatal("b caught up while its kernel lacked a connection")
	}
	if s := b.Stats(); s.ConfirmedRecords != 2 || s.RetriedRecords != 2 || s.UnconfirmedRecords != 0 {
		t.Fatalf("stats %+v", s)
	}
}

// TestConfirmGivesUp: what the table still lacks after maxConfirmRounds,
// or cannot be read, is counted and the sender's state taken as it is:
// the hold must end.
func TestConfirmGivesUp(t *testing.T) {
	c := tcp4("198.51.100.7", 40000)
	tests := []struct {
		name             string
		readErr          error
		retried, missing uint64
	}{
		{"always lost", nil, maxConfirmRounds, 1},
		{"table unreadable", errors.New("permission denied"), 0, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e, _, _ := testEngine(t, Config{Kernel: newFakeKernel(true)})
			e.backupUp = true
			e.catchingUp = func() bool { return true }
			var ended []string
			e.replayEnded = func(s string) { ended = append(ended, s) }
			b := peerB()
			e.deliver(b.message(flagReplay, t0, c.encode()), t0)
			e.deliver(b.message(flagReplay|flagReplayEnd, t0), t0)
			now := t0
			for round := 0; len(ended) == 0; round++ {
				if round > maxConfirmRounds+1 {
					t.Fatal("never gave up")
				}
				now = now.Add(confirmRetryDelay)
				req, ok := e.verification(now)
				if !ok {
					t.Fatalf("round %d: no check of the table due", round)
				}
				e.verified(verifyResult{peers: req.peers, missing: req.ids, err: tt.readErr}, now)
			}
			s := e.st.snapshot()
			if s.RetriedRecords != tt.retried || s.UnconfirmedRecords != tt.missing || s.ConfirmedRecords != 0 || ended[0] != "b" {
				t.Fatalf("stats %+v, ended %v", s, ended)
			}
			if len(e.pending) != 0 || e.tracked != 0 {
				t.Fatalf("still keeps %d records of %d directors", e.tracked, len(e.pending))
			}
		})
	}
}

// TestHoldFull: messages beyond the hold are dropped and counted, and
// their sender asked for its whole cache once the daemon runs; the end
// marker of its broken replay does not end its catch-up.
func TestHoldFull(t *testing.T) {
	e, tr, w := testEngine(t, Config{Kernel: newFakeKernel(false)})
	e.catchingUp = func() bool { return true }
	var ended []string
	e.replayEnded = func(s string) { ended = append(ended, s) }
	b := peerB()
	for i := range maxHeld + 1 {
		e.deliver(b.message(flagReplay, t0, tcp4("198.51.100.7", uint16(i+1)).encode()), t0)
	}
	e.deliver(b.message(flagReplay|flagReplayEnd, t0), t0)
	if s := e.st.snapshot(); s.HeldMessages != maxHeld || s.DroppedBackupDown != 2 || len(w.written) != 0 {
		t.Fatalf("stats %+v, %d written", s, len(w.written))
	}
	e.backupStarted(t0)
	if len(w.written) != maxHeld || len(ended) != 0 {
		t.Fatalf("%d written, ended %v", len(w.written), ended)
	}
	sent := tr.messages()
	if len(sent) != 1 || sent[0].to != "b" {
		t.Fatalf("sent %v, want a request to b", sent)
	}
	m, err := decodeMessage(sent[0].msg)
	if err != nil || m.flags != flagRequest || len(m.request.ranges) != 0 {
		t.Fatalf("sent %+v (%v), want a request for everything", m, err)
	}
}

// TestHoldKeepsOrder: what was held is taken in the order it came, and
// requests are answered while the daemon does not run.
func TestHoldKeepsOrder(t *testing.T) {
	e, _, w := testEngine(t, Config{Kernel: newFakeKernel(false)})
	b := peerB()
	first, second := tcp4("198.51.100.7", 1), tcp4("198.51.100.7", 1)
	second.state = 4 // a later record of the same connection
	e.deliver(b.message(0, t0, first.encode()), t0)
	e.deliver(b.message(0, t0, second.encode()), t0)
	e.backupStarted(t0)
	if len(w.written) != 2 {
		t.Fatalf("%d written", len(w.written))
	}
	if _, recs, _ := parseDatagram(w.written[1]); string(recs[0]) != string(second.encode()) {
		t.Fatalf("the later record was not written last")
	}
}

// TestConfirmForgetsLeftMember: what is kept of a director that left is
// dropped; it is awaited no more.
func TestConfirmForgetsLeftMember(t *testing.T) {
	e, tr, _ := testEngine(t, Config{Kernel: newFakeKernel(true)})
	e.backupUp = true
	e.catchingUp = func() bool { return true }
	e.deliver(peerB().message(flagReplay, t0, tcp4("198.51.100.7", 40000).encode()), t0)
	if e.tracked != 1 || e.pending["b"] == nil {
		t.Fatalf("keeps %d records, pending %v", e.tracked, e.pending)
	}
	r, err := New(Config{Transport: tr})
	if err != nil {
		t.Fatal(err)
	}
	r.MemberLeft("b")
	r.takeHints(e)
	if e.tracked != 0 || len(e.pending) != 0 {
		t.Fatalf("still keeps %d records of %d directors", e.tracked, len(e.pending))
	}
}
