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
