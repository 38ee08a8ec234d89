package cluster

import (
	"log/slog"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
)

// testLoop is a node's loop state without memberlist, driven by hand.
func testLoop(t *testing.T, incarnation uint64) *loopState {
	t.Helper()
	cfg := Config{Name: "b", Insecure: true, Log: slog.New(slog.DiscardHandler)}
	if err := cfg.setDefaults(); err != nil {
		t.Fatal(err)
	}
	cfg.Transport = (&memberlist.MockNetwork{}).NewTransport(cfg.Name)
	n := &Node{cfg: cfg, log: cfg.Log, incarnation: incarnation, joinReq: make(chan string, 16)}
	ml, err := memberlist.Create(n.memberlistConfig())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ml.Shutdown() })
	n.ml = ml
	n.st.init(n)
	return &n.st
}

// advance runs the liveness check every 10 ms from *now to until, as the
// loop does, and returns whether peer was live at the end.
func advance(s *loopState, now *time.Time, until time.Time, peer string) bool {
	for now.Before(until) {
		*now = now.Add(10 * time.Millisecond)
		s.onCheck(*now)
	}
	p := s.peers[peer]
	return p != nil && p.state.live()
}

// TestHeartbeatReplayIgnored: heartbeats of director a, captured while it
// lived, are sent again after it died. They must not keep it live, neither
// for the director that heard the originals nor for one that restarted
// since (and remembers nothing).
func TestHeartbeatReplayIgnored(t *testing.T) {
	vip := netip.MustParseAddr("10.0.0.50")
	now := time.Unix(1000, 0)
	b := testLoop(t, selfInc)
	b.lastCheck = now
	var captured []heartbeat
	for seq := uint64(1); seq <= 20; seq++ {
		hb := heartbeat{Name: "a", Addr: "10.0.0.2:7946", Incarnation: 5, Seq: seq, Ready: true, Parts: 1,
			Heard: []uint64{selfInc}, VIPs: []vipClaim{{vip, true}}}
		captured = append(captured, hb)
		b.onHeartbeat(hb, now)
		advance(b, &now, now.Add(50*time.Millisecond), "a")
	}
	if !b.peers["a"].state.live() || !b.n.MaySend("a", vip) {
		t.Fatal("a is not live (or not holding its VIP) while it sends heartbeats")
	}
	died := now
	if advance(b, &now, died.Add(b.n.cfg.FailureTimeout+20*time.Millisecond), "a") {
		t.Fatal("a is still live a failure timeout after its last heartbeat")
	}
	for _, hb := range captured {
		b.onHeartbeat(hb, now)
		if advance(b, &now, now.Add(50*time.Millisecond), "a") {
			t.Fatalf("replaying a's heartbeat %d made it live again", hb.Seq)
		}
	}

	// b restarted after a died: the replays echo b's old incarnation.
	b2 := testLoop(t, selfInc+1)
	b2.lastCheck = now
	for _, hb := range captured {
		b2.onHeartbeat(hb, now)
		if advance(b2, &now, now.Add(50*time.Millisecond), "a") {
			t.Fatalf("replaying a's heartbeat %d to a restarted director made a live", hb.Seq)
		}
	}
	if b2.n.MaySend("a", vip) {
		t.Error("the restarted director lets a send records of the VIP on the word of replayed heartbeats")
	}
	if p := b2.peers["a"]; p != nil && len(p.vips) > 0 {
		t.Errorf("replayed heartbeats gave a claims: %v", p.vips)
	}
}

// TestHeartbeatPartsRefreshOnce: the parts of one heartbeat complete the
// claims, in any order, but a part sent again does not refresh liveness.
func TestHeartbeatPartsRefreshOnce(t *testing.T) {
	b := testLoop(t, selfInc)
	hb := heartbeat{Name: "a", Incarnation: 5, Seq: 1, Heard: []uint64{selfInc}}
	for i := range 300 {
		hb.VIPs = append(hb.VIPs, vipClaim{netip.AddrFrom16([16]byte{0xfd, 14: byte(i >> 8), 15: byte(i)}), true})
	}
	parts := hb.encode()
	t0 := time.Unix(1000, 0)
	for i := len(parts) - 1; i >= 0; i-- { // newest first, as memberlist hands them over
		d, err := decodeHeartbeat(parts[i])
		if err != nil {
			t.Fatal(err)
		}
		b.onHeartbeat(d, t0.Add(time.Duration(len(parts)-i)*time.Millisecond))
	}
	p := b.peers["a"]
	if len(p.vips) != 300 {
		t.Fatalf("%d claims after every part, want 300", len(p.vips))
	}
	heard := p.lastHeard
	if !heard.Equal(t0.Add(time.Millisecond)) {
		t.Errorf("last heard at %v, want the first part's arrival %v", heard, t0.Add(time.Millisecond))
	}
	d, _ := decodeHeartbeat(parts[0])
	b.onHeartbeat(d, t0.Add(time.Second))
	if !p.lastHeard.Equal(heard) {
		t.Errorf("a part sent again moved last heard to %v", p.lastHeard)
	}
}

// TestStartupHoldCountsRunningTime: a starting director that was not
// scheduled during its start-up hold has heard nothing; the hold goes on
// for as long as it did not run.
func TestStartupHoldCountsRunningTime(t *testing.T) {
	s := testLoop(t, selfInc)
	start := time.Unix(1000, 0)
	s.n.started, s.lastCheck = start, start
	hold := s.n.cfg.StartupHold
	now := start.Add(hold + 500*time.Millisecond) // one check, after a stall longer than the hold
	s.onCheck(now)
	if s.ready {
		t.Fatal("ready at the first check after a stall that took the whole start-up hold")
	}
	for ; !s.ready; now = now.Add(10 * time.Millisecond) {
		s.onCheck(now)
	}
	if ran := now.Sub(start) - (hold + 500*time.Millisecond); ran < hold-10*time.Millisecond {
		t.Errorf("ready after running for %v of a %v hold", ran, hold)
	}
}

// catchUpReceiver is a connection-sync receiver that has or has not caught
// up with the other directors' connections.
type catchUpReceiver struct{ done atomic.Bool }

func (*catchUpReceiver) Deliver([]byte)      {}
func (*catchUpReceiver) MemberJoined(string) {}
func (*catchUpReceiver) MemberLeft(string)   {}
func (r *catchUpReceiver) CaughtUp() bool    { return r.done.Load() }

// TestStartupWaitsForConnections: after its start-up hold a director owns
// nothing until its connection-sync receiver has the others' connections.
func TestStartupWaitsForConnections(t *testing.T) {
	s := testLoop(t, selfInc)
	r := &catchUpReceiver{}
	s.n.SetSync(r)
	start := time.Unix(1000, 0)
	s.n.started, s.lastCheck = start, start
	now := start
	for ; now.Sub(start) < 2*s.n.cfg.StartupHold; now = now.Add(10 * time.Millisecond) {
		s.onCheck(now)
	}
	if s.ready {
		t.Fatal("ready before the other directors' connections arrived")
	}
	r.done.Store(true)
	s.onCheck(now.Add(10 * time.Millisecond))
	if !s.ready {
		t.Fatal("not ready once the connections arrived")
	}
}

// TestRestartWithEarlierIncarnation: director a restarts with a lower
// incarnation than before (its clock went back and its counter in the
// state directory was lost). Its peer takes it back once the process it
// heard last has been silent for the failure timeout, and from then on
// heartbeats captured from the earlier process do not count.
func TestRestartWithEarlierIncarnation(t *testing.T) {
	vip := netip.MustParseAddr("10.0.0.50")
	now := time.Unix(1000, 0)
	b := testLoop(t, selfInc)
	b.lastCheck = now
	timeout := b.n.cfg.FailureTimeout
	a := func(incarnation, seq uint64) heartbeat {
		return heartbeat{Name: "a", Addr: "10.0.0.2:7946", Incarnation: incarnation, Seq: seq, Ready: true, Parts: 1,
			Heard: []uint64{selfInc}, VIPs: []vipClaim{{vip, true}}}
	}
	var logged strings.Builder
	b.n.log = slog.New(slog.NewTextHandler(&logged, nil))
	const before, after = 5000, 4000
	var captured []heartbeat
	var stopped time.Time // the earlier process's last heartbeat
	for seq := uint64(1); seq <= 20; seq++ {
		captured = append(captured, a(before, seq))
		b.onHeartbeat(captured[len(captured)-1], now)
		stopped = now
		advance(b, &now, now.Add(50*time.Millisecond), "a")
	}
	if !b.peers["a"].state.live() {
		t.Fatal("a is not live while it sends heartbeats")
	}

	// a restarts at once, with an earlier incarnation; it is heard every 50 ms.
	back := func() bool { p := b.peers["a"]; return p.incarnation == after && p.state.live() }
	seq := uint64(0)
	for ; now.Sub(stopped) < timeout+b.n.cfg.Rise+time.Second && !back(); advance(b, &now, now.Add(50*time.Millisecond), "a") {
		seq++
		b.onHeartbeat(a(after, seq), now)
		if b.peers["a"].incarnation == after && now.Sub(stopped) <= timeout {
			t.Fatalf("the earlier incarnation counted %v after the later one's last heartbeat, before the failure timeout %v", now.Sub(stopped), timeout)
		}
	}
	if p := b.peers["a"]; !back() {
		t.Fatalf("a restarted with an earlier incarnation is %v (incarnation %d) %v after it stopped, want live as %d",
			p.state, p.incarnation, now.Sub(stopped), after)
	}
	if took := now.Sub(stopped); took > timeout+b.n.cfg.Rise+100*time.Millisecond {
		t.Errorf("a live again %v after it stopped, want within the failure timeout and the rise time (%v)", took, timeout+b.n.cfg.Rise)
	}
	if k := strings.Count(logged.String(), "director restarted with an earlier incarnation; accepting it"); k != 1 {
		t.Errorf("the restart with an earlier incarnation logged %d times, want once:\n%s", k, logged.String())
	}

	// The earlier process's heartbeats, sent again, are of a higher
	// incarnation than the live one's: they must not count, nor may the
	// live one's own old ones, nor another earlier incarnation's.
	replays := append(captured, a(after, 1), a(after-1, 1))
	for _, hb := range replays {
		seq++
		b.onHeartbeat(a(after, seq), now) // the real a is live throughout
		b.onHeartbeat(hb, now)
		advance(b, &now, now.Add(50*time.Millisecond), "a")
		if p := b.peers["a"]; p.incarnation != after || !p.state.live() {
			t.Fatalf("replaying incarnation %d seq %d made a %v as %d", hb.Incarnation, hb.Seq, p.state, p.incarnation)
		}
	}
}
