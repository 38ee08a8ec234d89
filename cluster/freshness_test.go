package cluster

import (
	"log/slog"
	"net/netip"
	"slices"
	"strconv"
	"testing"
	"time"
)

const selfInc = 100 // the receiving process's incarnation in these tests

func TestHeartbeatGuard(t *testing.T) {
	hb := func(name string, inc, seq uint64, heard ...uint64) heartbeat {
		return heartbeat{Name: name, Incarnation: inc, Seq: seq, Parts: 1, Heard: heard}
	}
	steps := []struct {
		name string
		hb   heartbeat
		want hbVerdict
	}{
		{"first contact without our echo (captured before we started)", hb("a", 5, 1), hbUnproven},
		{"first contact echoing another incarnation of ours", hb("a", 5, 2, 99), hbUnproven},
		{"first contact echoing us", hb("a", 5, 3, 7, selfInc), hbFresh},
		{"another part of the same heartbeat", hb("a", 5, 3), hbSamePart},
		{"an older heartbeat (late, or replayed)", hb("a", 5, 2, selfInc), hbOld},
		{"the next one needs no echo: we remember a", hb("a", 5, 4), hbFresh},
		{"a replay of the last one", hb("a", 5, 4), hbSamePart},
		{"a previous incarnation", hb("a", 4, 100, selfInc), hbOld},
		{"a restart without our echo", hb("a", 6, 1), hbUnproven},
		{"a restart echoing us", hb("a", 6, 1, selfInc), hbFresh},
		{"the incarnation before the restart", hb("a", 5, 5, selfInc), hbOld},
		{"another director is judged on its own", hb("b", 1, 1), hbUnproven},
	}
	var g heartbeatGuard
	at := time.Unix(1000, 0)
	for _, s := range steps {
		at = at.Add(time.Millisecond)
		if got := g.check(s.hb, selfInc, at); got != s.want {
			t.Errorf("%s: verdict %d, want %d", s.name, got, s.want)
		}
	}
	if g.unused != 7 {
		t.Errorf("%d heartbeats counted unused, want 7", g.unused)
	}
	// Echoed: everything heard but the old incarnations, newest first.
	if got, want := g.echo(at), []uint64{1, 6, 5}; !slices.Equal(got, want) {
		t.Errorf("echo %v, want %v", got, want)
	}
	if got := g.echo(at.Add(echoFor + time.Second)); len(got) != 0 {
		t.Errorf("echo %v after %v of silence, want none", got, echoFor)
	}
}

func TestHeartbeatGuardBounds(t *testing.T) {
	var g heartbeatGuard
	at := time.Unix(1000, 0)
	for i := range maxRemembered + 10 {
		at = at.Add(time.Millisecond)
		g.check(heartbeat{Name: "d" + strconv.Itoa(i), Incarnation: uint64(i + 1), Seq: 1, Heard: []uint64{selfInc}}, selfInc, at)
	}
	if len(g.used) != maxRemembered {
		t.Errorf("%d directors remembered, want at most %d", len(g.used), maxRemembered)
	}
	if got := g.echo(at); len(got) != maxHeard || got[0] != maxRemembered+10 {
		t.Errorf("echo of %d incarnations starting %v, want the newest %d", len(got), got[:1], maxHeard)
	}
}

// testLoop is a node's loop state without memberlist, driven by hand.
func testLoop(t *testing.T, incarnation uint64) *loopState {
	t.Helper()
	cfg := Config{Name: "b", Insecure: true, Log: slog.New(slog.DiscardHandler)}
	if err := cfg.setDefaults(); err != nil {
		t.Fatal(err)
	}
	n := &Node{cfg: cfg, log: cfg.Log, incarnation: incarnation, joinReq: make(chan string, 16)}
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
	return p != nil && p.live
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
	if !b.peers["a"].live || !b.n.MaySend("a", vip) {
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

func TestAuthority(t *testing.T) {
	v1, v2 := netip.MustParseAddr("10.0.0.50"), netip.MustParseAddr("10.0.0.51")
	var a authority
	t0 := time.Unix(1000, 0)
	a.set("a", map[netip.Addr]bool{v1: true, v2: false}, t0)
	a.set("b", map[netip.Addr]bool{v1: false, v2: true}, t0)
	check := func(when string, now time.Time, want map[string][]bool) {
		t.Helper()
		for sender, w := range want {
			for i, vip := range []netip.Addr{v1, v2} {
				if got := a.maySend(sender, vip, now); got != w[i] {
					t.Errorf("%s: %s may send %s: %v, want %v", when, sender, vip, got, w[i])
				}
			}
		}
	}
	check("held", t0, map[string][]bool{"a": {true, false}, "b": {false, true}, "c": {false, false}})
	// a hands v1 to b: a's late records are still taken for a moment.
	t1 := t0.Add(time.Minute)
	a.set("a", map[netip.Addr]bool{v1: false, v2: false}, t1)
	a.set("b", map[netip.Addr]bool{v1: true, v2: true}, t1)
	check("just released", t1.Add(releaseGrace), map[string][]bool{"a": {true, false}, "b": {true, true}})
	check("released", t1.Add(releaseGrace+time.Millisecond), map[string][]bool{"a": {false, false}, "b": {true, true}})
	// b leaves (nil claims), then takes v2 again.
	a.set("b", nil, t1.Add(time.Hour))
	check("left", t1.Add(time.Hour+2*releaseGrace), map[string][]bool{"b": {false, false}})
	a.set("b", map[netip.Addr]bool{v2: true}, t1.Add(2*time.Hour))
	check("back", t1.Add(2*time.Hour), map[string][]bool{"b": {false, true}})
	if a.maySend("b", netip.AddrFrom16(v2.As16()), t1.Add(2*time.Hour)) != true {
		t.Error("an IPv4-mapped VIP is not the VIP")
	}
}

// FuzzHeartbeatGuard feeds the guard any sequence of heartbeats from three
// directors: a heartbeat counts (refreshes liveness) only if it is newer
// than every one that counted before from its sender, and a sender's new
// incarnation only if it echoes this process.
func FuzzHeartbeatGuard(f *testing.F) {
	f.Add([]byte{0, 1, 1, 1, 0, 1, 2, 0, 0, 1, 1, 0, 1, 2, 1, 1, 0, 2, 1, 0})
	f.Fuzz(func(t *testing.T, ops []byte) {
		var g heartbeatGuard
		last := map[string]hbStamp{}
		at := time.Unix(1000, 0)
		for i := 0; i+4 <= len(ops); i += 4 {
			hb := heartbeat{Name: string(rune('a' + ops[i]%3)), Incarnation: uint64(ops[i+1] % 4), Seq: uint64(ops[i+2] % 8)}
			if ops[i+3]&1 != 0 {
				hb.Heard = []uint64{selfInc}
			}
			at = at.Add(time.Millisecond)
			v := g.check(hb, selfInc, at)
			prev, seen := last[hb.Name]
			newer := !seen || hb.Incarnation > prev.incarnation || hb.Incarnation == prev.incarnation && hb.Seq > prev.seq
			switch {
			case v == hbFresh && !newer:
				t.Fatalf("op %d: %+v counted, not newer than %+v", i/4, hb, prev)
			case v == hbFresh && (!seen || hb.Incarnation > prev.incarnation) && len(hb.Heard) == 0:
				t.Fatalf("op %d: a new incarnation counted without echoing us", i/4)
			case v == hbSamePart && (!seen || hb.Incarnation != prev.incarnation || hb.Seq != prev.seq):
				t.Fatalf("op %d: %+v taken as a part of %+v", i/4, hb, prev)
			}
			if v == hbFresh {
				last[hb.Name] = hbStamp{hb.Incarnation, hb.Seq, at}
			}
		}
	})
}
