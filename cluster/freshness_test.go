package cluster

import (
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
		{"an earlier incarnation while a is heard: not yet", hb("a", 4, 100, selfInc), hbUnproven},
		{"a restart without our echo", hb("a", 6, 1), hbUnproven},
		{"a restart echoing us", hb("a", 6, 1, selfInc), hbFresh},
		{"the incarnation before the restart", hb("a", 5, 5, selfInc), hbOld},
		{"the first one, a restart ago", hb("a", 5, 6, selfInc), hbOld},
		{"another director is judged on its own", hb("b", 1, 1), hbUnproven},
	}
	g := heartbeatGuard{quiet: time.Second}
	at := time.Unix(1000, 0)
	for _, s := range steps {
		at = at.Add(time.Millisecond)
		if got := g.check(s.hb, selfInc, at); got != s.want {
			t.Errorf("%s: verdict %d, want %d", s.name, got, s.want)
		}
	}
	if g.unused != 8 {
		t.Errorf("%d heartbeats counted unused, want 8", g.unused)
	}
	// Echoed: everything heard but the old incarnations, newest first.
	if got, want := g.echo(at), []uint64{1, 6, 4, 5}; !slices.Equal(got, want) {
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

// FuzzHeartbeatGuard feeds the guard any sequence of heartbeats from three
// directors, at any pace. A heartbeat counts (refreshes liveness) exactly
// when it is newer than the last one that counted from its sender (same
// incarnation, higher seq), or when it comes from an incarnation that never
// counted from that sender, echoes this process, and is higher than the
// last one or arrives after the last one has been silent for quiet. So a
// director is never locked out, and nothing used before counts again.
func FuzzHeartbeatGuard(f *testing.F) {
	f.Add([]byte{0, 1, 1, 1, 0, 1, 2, 0, 0, 1, 1, 0, 1, 2, 1, 1, 0, 2, 1, 0})
	f.Add([]byte{0, 3, 1, 1, 0, 3, 2, 0, 0, 1, 1, 1, 0, 1, 2, 3, 0, 3, 3, 1, 0, 2, 1, 1})
	const quiet = 5 * time.Millisecond
	type model struct {
		last hbStamp
		used map[uint64]bool // every incarnation that counted
	}
	f.Fuzz(func(t *testing.T, ops []byte) {
		g := heartbeatGuard{quiet: quiet}
		seen := map[string]*model{}
		at := time.Unix(1000, 0)
		for i := 0; i+4 <= len(ops); i += 4 {
			hb := heartbeat{Name: string(rune('a' + ops[i]%3)), Incarnation: uint64(ops[i+1] % 4), Seq: uint64(ops[i+2] % 8)}
			if ops[i+3]&1 != 0 {
				hb.Heard = []uint64{selfInc}
			}
			at = at.Add(time.Duration(1+ops[i+3]>>1&7) * time.Millisecond)
			v := g.check(hb, selfInc, at)
			m := seen[hb.Name]
			var want bool
			switch {
			case m == nil:
				want = len(hb.Heard) > 0
			case hb.Incarnation == m.last.incarnation:
				want = hb.Seq > m.last.seq
			case m.used[hb.Incarnation]:
			default:
				want = len(hb.Heard) > 0 && (hb.Incarnation > m.last.incarnation || at.Sub(m.last.at) > quiet)
			}
			switch {
			case (v == hbFresh) != want:
				t.Fatalf("op %d: %+v verdict %d, counting it is %v (last counted %+v)", i/4, hb, v, want, m)
			case v == hbSamePart && (m == nil || hb.Incarnation != m.last.incarnation || hb.Seq != m.last.seq):
				t.Fatalf("op %d: %+v taken as a part of %+v", i/4, hb, m.last)
			}
			if v == hbFresh {
				if m == nil {
					m = &model{used: map[uint64]bool{}}
					seen[hb.Name] = m
				}
				m.last = hbStamp{incarnation: hb.Incarnation, seq: hb.Seq, at: at}
				m.used[hb.Incarnation] = true
			}
		}
	})
}
