package cluster

import (
	"context"
	"crypto/ed25519"
	"log/slog"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lvsd/lvsd/cluster/identity"
)

func TestRestartHoldExtension(t *testing.T) {
	hb := goldenV3[0].hb
	for _, tc := range []struct {
		name    string
		version byte
		keys    *identity.Keys
		hold    time.Duration
		want    time.Duration
	}{
		{"none", hbVersion, fuzzKeys, 0, 0},
		{"signed", hbVersion, fuzzKeys, 20 * time.Second, 20 * time.Second},
		{"unsigned", hbVersion, nil, 20 * time.Second, 20 * time.Second},
		{"rounded up to whole seconds", hbVersion, fuzzKeys, 1500 * time.Millisecond, 2 * time.Second},
		{"bounded", hbVersion, fuzzKeys, 5 * time.Minute, MaxRestartHold},
		{"v3 has no extensions", hbVersionV3, nil, 20 * time.Second, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			hb.RestartHold = tc.hold
			parts := hb.encodeAs(tc.version, tc.keys)
			if len(parts) != 1 {
				t.Fatalf("%d parts", len(parts))
			}
			got, err := decodeHeartbeat(parts[0])
			if err != nil {
				t.Fatal(err)
			}
			if got.RestartHold != tc.want {
				t.Errorf("hold %v, want %v", got.RestartHold, tc.want)
			}
			if tc.keys.Signs() && tc.version == hbVersion {
				if err := (&identity.Keys{Directors: map[string][]ed25519.PublicKey{hb.Name: {identity.Public(fuzzKeys.Private)}}}).Verify(hb.Name, got.signed, got.sig); err != nil {
					t.Errorf("the hold is not covered by the signature: %v", err)
				}
			}
		})
	}
}

// A peer's restart hold is read from what a director sends, so it is
// bounded there: a value past the bound is clamped, a value of the wrong
// size refuses the heartbeat, and an unknown extension beside it is
// skipped.
func TestRestartHoldExtensionInput(t *testing.T) {
	unsigned := goldenV3[0].hb.encodeAs(hbVersion, nil)[0]
	for _, tc := range []struct {
		name    string
		typ     byte
		value   []byte
		want    time.Duration
		wantErr string
	}{
		{"most seconds", extRestartHold, []byte{0xff, 0xff}, MaxRestartHold, ""},
		{"zero", extRestartHold, []byte{0, 0}, 0, ""},
		{"short", extRestartHold, []byte{1}, 0, "restart hold extension of 1 bytes"},
		{"long", extRestartHold, []byte{0, 1, 2}, 0, "restart hold extension of 3 bytes"},
		{"another type", extRestartHold + 1, []byte{0, 30}, 0, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := decodeHeartbeat(withExtension(unsigned, tc.typ, tc.value))
			switch {
			case tc.wantErr != "":
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err %v, want %q", err, tc.wantErr)
				}
			case err != nil:
				t.Fatal(err)
			case got.RestartHold != tc.want:
				t.Errorf("hold %v, want %v", got.RestartHold, tc.want)
			}
		})
	}
}

func TestPeerAtUnderRestartHold(t *testing.T) {
	const timeout = 100 * time.Millisecond
	now := time.Unix(1000, 0)
	for _, tc := range []struct {
		name    string
		state   peerState
		silence time.Duration
		hold    time.Duration // from now; 0: none
		want    peerState
	}{
		{"heard: live", peerLive, 10 * time.Millisecond, 5 * time.Second, peerLive},
		{"half a timeout: unsure", peerLive, 60 * time.Millisecond, 5 * time.Second, peerUnsure},
		{"past the timeout: restarting", peerUnsure, 150 * time.Millisecond, 5 * time.Second, peerRestarting},
		{"long silent under the hold", peerRestarting, 4 * time.Second, time.Second, peerRestarting},
		{"hold over: gone", peerRestarting, 4 * time.Second, -time.Millisecond, peerGone},
		{"no hold: lingering", peerUnsure, 150 * time.Millisecond, 0, peerLingering},
		{"left stays left", peerLeft, 150 * time.Millisecond, 5 * time.Second, peerLeft},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := &peer{state: tc.state, lastHeard: now.Add(-tc.silence), since: now.Add(-time.Minute)}
			if tc.hold != 0 {
				p.holdUntil = now.Add(tc.hold)
			}
			if got := peerAt(p, now, timeout, timeout); got != tc.want {
				t.Errorf("%v, want %v", got, tc.want)
			}
		})
	}
}

// holdsNever fails if n holds vip at any time within d.
func holdsNever(t *testing.T, n *testNode, vip netip.Addr, d time.Duration) {
	t.Helper()
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(2 * time.Millisecond) {
		if n.Holds(vip) {
			t.Fatalf("%s took %s", n.cfg.Name, vip)
		}
	}
}

// restartNode starts a new process of old's director, as a restart
// would: a new transport and incarnation, old's settings, adopting what
// it held.
func restartNode(t *testing.T, old *testNode, adopt []netip.Addr, until time.Time) *testNode {
	t.Helper()
	tr := newCutTransport(t)
	buf := &syncBuffer{}
	cfg := old.cfg
	cfg.Bind, cfg.Transport, cfg.Incarnation = "127.0.0.1:"+strconv.Itoa(tr.GetAutoBindPort()), tr, 0
	cfg.Adopt, cfg.AdoptUntil = adopt, until
	cfg.Log = slog.New(slog.NewTextHandler(buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	n, err := Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	tn := &testNode{Node: n, tr: tr, log: buf}
	t.Cleanup(func() {
		_ = n.Leave(context.Background(), nil)
		if t.Failed() {
			t.Logf("log of the restarted %s:\n%s", cfg.Name, buf)
		}
	})
	return tn
}

// A director that restarts under a hold keeps its VIP all along: the
// peer does not take it while it is silent, and takes the new process's
// claim as the same owner's.
func TestNodeRestartHoldKeepsVIP(t *testing.T) {
	nodes := startNodes(t, Rules{Mode: ActiveStandby, Preempt: true}, testKey, []netip.Addr{vip1}, "a", "b")
	a, b := nodes[0], nodes[1]
	waitHolders(t, nodes, vip1, 5*time.Second, "a")
	a.AddressChanged(vip1, true)
	ctx := context.Background()
	if _, err := a.HoldForRestart(ctx, 2*MaxRestartHold); err == nil {
		t.Error("a hold past the bound was taken")
	}
	h, err := a.HoldForRestart(ctx, 3*time.Second)
	if err != nil || len(h.VIPs) != 1 || h.VIPs[0] != vip1 {
		t.Fatalf("hold %+v, %v", h, err)
	}
	time.Sleep(100 * time.Millisecond) // b hears of the hold
	if err := a.Leave(ctx, func(context.Context) error {
		t.Error("a released its addresses under the hold")
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	holdsNever(t, b, vip1, time.Second) // far past the failure timeout (150ms)
	v, err := b.View(ctx)
	if err != nil || len(v.Members) != 2 || v.Members[1].RestartHoldSeconds <= 0 || len(v.Members[1].Holds) != 1 {
		t.Errorf("b's view of a under the hold: %+v, %v", v.Members, err)
	}

	a2 := restartNode(t, a, h.VIPs, h.Until)
	if !a2.Holds(vip1) {
		t.Error("the new process does not hold the adopted VIP at start")
	}
	for end := time.Now().Add(1500 * time.Millisecond); time.Now().Before(end); time.Sleep(2 * time.Millisecond) {
		if b.Holds(vip1) || !a2.Holds(vip1) {
			t.Fatalf("the VIP moved: b holds %v, the restarted a %v", b.Holds(vip1), a2.Holds(vip1))
		}
	}
	if v, _ := a2.View(ctx); v.State != "active" {
		t.Errorf("the restarted a is %s, want active", v.State)
	}
	if !strings.Contains(b.log.String(), "director back from a planned restart") || strings.Contains(b.log.String(), "taking VIP") {
		t.Errorf("b's log:\n%s", b.log)
	}
}

// A hold that ends without the director back is a failure: the peer
// takes over then, not before.
func TestNodeRestartHoldExpires(t *testing.T) {
	nodes := startNodes(t, Rules{Mode: ActiveStandby, Preempt: true}, testKey, []netip.Addr{vip1}, "a", "b")
	a, b := nodes[0], nodes[1]
	waitHolders(t, nodes, vip1, 5*time.Second, "a")
	ctx := context.Background()
	asked := time.Now()
	if _, err := a.HoldForRestart(ctx, time.Second); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	start := time.Now()
	if err := a.Leave(ctx, nil); err != nil {
		t.Fatal(err)
	}
	holdsNever(t, b, vip1, time.Until(asked.Add(900*time.Millisecond)))
	waitHolders(t, nodes[1:], vip1, 3*time.Second, "b")
	t.Logf("b took over %v after a stopped (hold 1s, asked 0.1s before)", time.Since(start).Round(time.Millisecond))
	if !strings.Contains(b.log.String(), "director not back within its restart hold") {
		t.Errorf("b's log:\n%s", b.log)
	}
}

// An ended hold (d 0) makes a stop a plain handover again.
func TestNodeRestartHoldEnded(t *testing.T) {
	nodes := startNodes(t, Rules{Mode: ActiveStandby, Preempt: true}, testKey, []netip.Addr{vip1}, "a", "b")
	a := nodes[0]
	waitHolders(t, nodes, vip1, 5*time.Second, "a")
	ctx := context.Background()
	for _, d := range []time.Duration{10 * time.Second, 0} {
		if _, err := a.HoldForRestart(ctx, d); err != nil {
			t.Fatal(err)
		}
	}
	released := false
	if err := a.Leave(ctx, func(context.Context) error { released = true; return nil }); err != nil {
		t.Fatal(err)
	}
	if !released {
		t.Error("a kept its addresses after its hold ended")
	}
	waitHolders(t, nodes[1:], vip1, time.Second, "b")
}

// A hold is refused while a live director reads wire version 3 only: it
// would take the VIPs over anyway.
func TestRestartHoldRefusedBesideV3(t *testing.T) {
	s := testLoop(t, 1)
	s.peers["old"] = &peer{name: "old", addr: "10.0.0.3:7946", state: peerLive}
	s.peers["new"] = &peer{name: "new", addr: "10.0.0.4:7946", state: peerLive}
	s.wire["10.0.0.3:7946"] = wireVersion{version: hbVersionV3}
	s.wire["10.0.0.4:7946"] = wireVersion{version: hbVersion}
	if got := s.peersWithoutHold(); !slices.Equal(got, []string{"old"}) {
		t.Errorf("peers without the hold: %v, want [old]", got)
	}
	s.peers["old"].state = peerGone
	if got := s.peersWithoutHold(); len(got) != 0 {
		t.Errorf("a gone peer counted: %v", got)
	}
}
