package cluster

import (
	"bytes"
	"fmt"
	"log/slog"
	"reflect"
	"strings"
	"testing"
	"time"
)

func digestOf(services map[string]uint64) *ConfigDigest { return NewConfigDigest(1, services) }

// sender is director a's side: its heartbeats as they go on the wire (v4,
// encoded and decoded again), with the configuration extensions of its
// own loop state.
type sender struct {
	s   *loopState
	seq uint64
}

func newSender(t *testing.T, d *ConfigDigest) *sender {
	s := testLoop(t, 5)
	s.n.cfg.Name = "a"
	s.takeConfig(d)
	return &sender{s: s}
}

// beat returns a's next heartbeat as b decodes it, a's loop having heard
// b (whose config is mine) so that a sends runs while they differ.
func (a *sender) beat(t *testing.T, b *loopState) heartbeat {
	t.Helper()
	a.seq++
	hb := heartbeat{Name: "a", Addr: "10.0.0.2:7946", Incarnation: 5, Seq: a.seq, Ready: true, Heard: []uint64{selfInc}}
	hb.Config, hb.ConfigRun = a.s.configExtensions()
	parts := hb.encodeAs(hbVersion, fuzzKeys)
	if len(parts) != 1 {
		t.Fatalf("%d parts", len(parts))
	}
	got, err := decodeHeartbeat(parts[0])
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// hear lets a hear b's configuration (what b's heartbeat says of it).
func (a *sender) hear(b *loopState) {
	p := a.s.peers["b"]
	if p == nil {
		p = &peer{name: "b", state: peerLive}
		a.s.peers["b"] = p
	}
	adv, run := b.configExtensions()
	a.s.noteConfig(p, heartbeat{Config: adv, ConfigRun: run})
}

func logTo(s *loopState) *bytes.Buffer {
	var buf bytes.Buffer
	s.n.log = slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelInfo}))
	return &buf
}

// Two directors whose services differ name them on both sides within a
// heartbeat or two, log it once, and clear when the files agree again.
func TestConfigDriftNamesServices(t *testing.T) {
	mine := map[string]uint64{"api": 1, "db": 2, "web": 3, "gone": 4}
	theirs := map[string]uint64{"api": 1, "db": 2, "web": 30, "new": 5}
	now := time.Unix(1000, 0)
	b := testLoop(t, selfInc)
	b.lastCheck = now
	log := logTo(b)
	b.takeConfig(digestOf(mine))
	a := newSender(t, digestOf(theirs))

	b.onHeartbeat(a.beat(t, b), now) // the digest: b sees it differs, names nothing yet
	v := b.view(now).Members[1].Config
	if v == nil || v.Match != ConfigDifferent || v.Compared {
		t.Fatalf("after the first heartbeat: %+v", v)
	}
	a.hear(b) // a sees the difference too, and sends runs from now on
	b.onHeartbeat(a.beat(t, b), now)
	v = b.view(now).Members[1].Config
	want := &ConfigView{Match: ConfigDifferent, Services: []string{"gone", "new", "web"}, Differing: 3, Compared: true}
	if !reflect.DeepEqual(v, want) {
		t.Fatalf("view %+v, want %+v", v, want)
	}
	for range 5 {
		b.onHeartbeat(a.beat(t, b), now)
	}
	if n := strings.Count(log.String(), "differs from the peer's"); n != 1 {
		t.Fatalf("%d drift lines, want 1:\n%s", n, log)
	}
	if !strings.Contains(log.String(), "peer=a services=gone,new,web differing=3") {
		t.Fatalf("log: %s", log)
	}

	// b reloads what a runs: the same.
	b.takeConfig(digestOf(theirs))
	b.onHeartbeat(a.beat(t, b), now)
	if v := b.view(now).Members[1].Config; v.Match != ConfigSame || v.Services != nil {
		t.Fatalf("after the fix: %+v", v)
	}
	if !strings.Contains(log.String(), "matches the peer's again") {
		t.Fatalf("no line when it cleared: %s", log)
	}
}

// A director of the release before (v3, or v4 without the extension) is
// unknown, never different; a v3 part of a heartbeat sent in both
// versions does not undo what the v4 part said.
func TestConfigDriftUnknownPeer(t *testing.T) {
	now := time.Unix(1000, 0)
	b := testLoop(t, selfInc)
	b.takeConfig(digestOf(map[string]uint64{"web": 1}))
	old := heartbeat{Name: "a", Addr: "10.0.0.2:7946", Incarnation: 5, Seq: 1, Ready: true, Heard: []uint64{selfInc}}
	for _, v := range []byte{hbVersionV3, hbVersion} {
		hb, err := decodeHeartbeat(old.encodeAs(v, nil)[0])
		if err != nil {
			t.Fatal(err)
		}
		b.onHeartbeat(hb, now)
		if c := b.view(now).Members[1].Config; c == nil || c.Match != ConfigUnknown {
			t.Fatalf("v%d without a digest: %+v", v, c)
		}
	}
	a := newSender(t, digestOf(map[string]uint64{"web": 1}))
	a.seq = 1
	b.onHeartbeat(a.beat(t, b), now)
	v3, _ := decodeHeartbeat(heartbeat{Name: "a", Addr: "10.0.0.2:7946", Incarnation: 5, Seq: 2, Heard: []uint64{selfInc}}.encode()[0])
	b.onHeartbeat(v3, now)
	if c := b.view(now).Members[1].Config; c.Match != ConfigSame {
		t.Fatalf("after a v3 part: %+v", c)
	}
	other := newSender(t, NewConfigDigest(2, map[string]uint64{"web": 9}))
	other.seq = 2
	b.onHeartbeat(other.beat(t, b), now)
	if c := b.view(now).Members[1].Config; c.Match != ConfigUnknown {
		t.Fatalf("another digest scheme: %+v", c)
	}
}

// At 10,000 services every heartbeat carries at most one run, of at most
// 255 bytes; the one service that differs is named after one rotation,
// with one comparison of the whole lists, not one per heartbeat.
func TestConfigDriftScale(t *testing.T) {
	const n = 10_000
	mine, theirs := map[string]uint64{}, map[string]uint64{}
	for i := range n {
		name := fmt.Sprintf("service-%05d", i)
		mine[name], theirs[name] = uint64(i), uint64(i)
	}
	theirs["service-04711"] = 1
	now := time.Unix(1000, 0)
	b := testLoop(t, selfInc)
	b.takeConfig(digestOf(mine))
	a := newSender(t, digestOf(theirs))
	b.onHeartbeat(a.beat(t, b), now)
	a.hear(b)
	beats := 0
	for ; beats < n; beats++ {
		hb := a.beat(t, b)
		if ext := len(hb.appendExtensions(nil)); ext > 2+configDigestLen+2+maxExtension {
			t.Fatalf("heartbeat %d carries %d bytes of extensions", beats, ext)
		}
		b.onHeartbeat(hb, now)
		if b.peers["a"].config.compared {
			break
		}
	}
	v := b.view(now).Members[1].Config
	if !reflect.DeepEqual(v.Services, []string{"service-04711"}) || !v.Compared {
		t.Fatalf("after %d heartbeats: %+v", beats, v)
	}
	perRun := (maxExtension - configRunHeader) / (9 + len("service-00000"))
	if beats > n/perRun+1 {
		t.Fatalf("%d heartbeats to compare %d services (%d a run)", beats, n, perRun)
	}
	t.Logf("%d services compared in %d heartbeats", n, beats)
}

// Under ECMP a live peer's different service is a risk to its flows: the
// view and the log line say so.
func TestConfigDriftECMPFlowsAtRisk(t *testing.T) {
	now := time.Unix(1000, 0)
	b := testLoop(t, selfInc)
	b.n.cfg.Rules.Mode = ECMP
	log := logTo(b)
	b.takeConfig(digestOf(map[string]uint64{"web": 1}))
	a := newSender(t, digestOf(map[string]uint64{"web": 2}))
	b.onHeartbeat(a.beat(t, b), now)
	a.hear(b)
	b.onHeartbeat(a.beat(t, b), now)
	b.peers["a"].state = peerLive
	if v := b.view(now).Members[1].Config; !v.FlowsAtRisk || v.Services[0] != "web" {
		t.Fatalf("%+v", v)
	}
	if !strings.Contains(log.String(), "flows_at_risk=true") {
		t.Fatalf("log: %s", log)
	}
}

// Runs that lie are left out, and cost no more than they hold.
func TestConfigRunBounds(t *testing.T) {
	for _, tc := range []struct {
		name string
		b    []byte
	}{
		{"too many services", []byte{1, 2, 3, 4, 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0}},
		{"start past the end", []byte{1, 2, 3, 4, 0, 0, 0, 1, 0, 0, 0, 1}},
		{"entry runs past", []byte{1, 2, 3, 4, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 9, 'a'}},
		{"more entries than services", append([]byte{1, 2, 3, 4, 0, 0, 0, 1, 0, 0, 0, 0},
			0, 0, 0, 0, 0, 0, 0, 0, 1, 'a', 0, 0, 0, 0, 0, 0, 0, 0, 1, 'b')},
		{"short", []byte{1, 2, 3}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if r := decodeRun(tc.b); r != nil {
				t.Fatalf("decoded %+v", r)
			}
		})
	}
	if decodeAdvert(make([]byte, configDigestLen)) != nil {
		t.Fatal("scheme 0 taken")
	}
	// A malformed digest does not cost the heartbeat.
	plain := heartbeat{Name: "d", Addr: "a"}.encodeAs(hbVersion, nil)[0]
	hb, err := decodeHeartbeat(withExtension(plain, extConfigDigest, []byte{1, 2}))
	if err != nil || hb.Config != nil {
		t.Fatalf("%+v, %v", hb, err)
	}
}

// The extensions survive every wire form that carries them, and a part
// with them still fits a datagram.
func TestConfigExtensionsOnTheWire(t *testing.T) {
	services := map[string]uint64{}
	for i := range 50 {
		services[fmt.Sprintf("%s-%d", strings.Repeat("x", 150), i)] = uint64(i)
	}
	d := digestOf(services)
	run, next := runFrom(d, 0)
	if next != 1 || len(run.entries) != 1 {
		t.Fatalf("a run of %d names of 150+ bytes, next %d", len(run.entries), next)
	}
	hb := goldenV3[0].hb
	hb.Config, hb.ConfigRun = advertOf(d), run
	for _, keys := range []*struct{ signed bool }{{false}, {true}} {
		k := fuzzKeys
		if !keys.signed {
			k = nil
		}
		got, err := decodeHeartbeat(hb.encodeAs(hbVersion, k)[0])
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got.Config, hb.Config) || !reflect.DeepEqual(got.ConfigRun, hb.ConfigRun) {
			t.Fatalf("signed %v: %+v %+v", keys.signed, got.Config, got.ConfigRun)
		}
	}
	v3, err := decodeHeartbeat(hb.encodeAs(hbVersionV3, nil)[0])
	if err != nil || v3.Config != nil || v3.ConfigRun != nil {
		t.Fatalf("v3 carries %+v, %v", v3.Config, err)
	}
}

// The fake compares at once what Node compares over heartbeats.
func TestFakeConfigDrift(t *testing.T) {
	f := NewFake(Rules{Mode: ActiveStandby, Quorum: 1})
	a, b := f.Add("a", 100), f.Add("b", 50)
	a.AdvertiseConfig(digestOf(map[string]uint64{"web": 1, "api": 2}))
	v, _ := a.View(t.Context())
	if c := v.Members[1].Config; c.Match != ConfigUnknown {
		t.Fatalf("b advertised nothing yet: %+v", c)
	}
	b.AdvertiseConfig(digestOf(map[string]uint64{"web": 1, "db": 2}))
	v, _ = a.View(t.Context())
	want := &ConfigView{Match: ConfigDifferent, Services: []string{"api", "db"}, Differing: 2, Compared: true}
	if c := v.Members[1].Config; !reflect.DeepEqual(c, want) {
		t.Fatalf("%+v, want %+v", c, want)
	}
	// b holds a change of web while a runs what b has in force.
	b.AdvertiseConfig(digestOf(map[string]uint64{"web": 3, "api": 2}).Holding(digestOf(map[string]uint64{"web": 1, "api": 2}), time.Now()))
	v, _ = b.View(t.Context())
	want = &ConfigView{Match: ConfigDifferent, Services: []string{"web"}, Differing: 1, Compared: true, Held: true}
	if c := v.Members[1].Config; !reflect.DeepEqual(c, want) {
		t.Fatalf("a seen from b holding a change: %+v, want %+v", c, want)
	}
}

// A director holding a loaded change (coordinated changes) is expected to
// differ from a peer that has not loaded it yet: that is logged as held,
// not as flows at risk. Anything else the peer differs in is drift, and
// so is the difference that stays once the hold ends.
func TestConfigDriftHeldChange(t *testing.T) {
	inForce := map[string]uint64{"web": 1, "api": 1}
	for _, tc := range []struct {
		name         string
		held, theirs map[string]uint64
		wantHeld     bool
	}{
		{"the peer runs what is in force here", map[string]uint64{"web": 2, "api": 1}, inForce, true},
		{"the held change adds a service", map[string]uint64{"web": 1, "api": 1, "new": 1}, inForce, true},
		{"the held change removes a service", map[string]uint64{"web": 1}, inForce, true},
		{"the peer has a third definition", map[string]uint64{"web": 2, "api": 1}, map[string]uint64{"web": 3, "api": 1}, false},
		{"the peer also differs in an unchanged service", map[string]uint64{"web": 2, "api": 1}, map[string]uint64{"web": 1, "api": 2}, false},
		{"the peer lacks a service in force", map[string]uint64{"web": 2, "api": 1}, map[string]uint64{"web": 1}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			now := time.Unix(1000, 0)
			until := time.Date(2026, 12, 5, 11, 45, 30, 0, time.UTC)
			b := testLoop(t, selfInc)
			b.n.cfg.Rules.Mode = ECMP
			log := logTo(b)
			b.takeConfig(digestOf(tc.held).Holding(digestOf(inForce), until))
			a := newSender(t, digestOf(tc.theirs))
			b.onHeartbeat(a.beat(t, b), now)
			a.hear(b)
			b.onHeartbeat(a.beat(t, b), now)
			b.peers["a"].state = peerLive
			v := b.view(now).Members[1].Config
			if v.Match != ConfigDifferent || !v.Compared || v.Held != tc.wantHeld || v.FlowsAtRisk == tc.wantHeld {
				t.Fatalf("view %+v, want held %t and flows at risk %t", v, tc.wantHeld, !tc.wantHeld)
			}
			logged := log.String()
			if tc.wantHeld != strings.Contains(logged, "level=INFO msg=\"service configuration differs from the peer's only by the change held here") ||
				tc.wantHeld != strings.Contains(logged, "held_until=2026-12-05T11:45:30Z") ||
				tc.wantHeld == strings.Contains(logged, "flows_at_risk=true") {
				t.Fatalf("held %t, log:\n%s", tc.wantHeld, logged)
			}
			if !tc.wantHeld {
				return
			}
			// The wait is over while the peer lags: the change goes in
			// force alone, and the difference is drift now.
			log.Reset()
			b.takeConfig(digestOf(tc.held))
			if v := b.view(now).Members[1].Config; v.Held || !v.FlowsAtRisk {
				t.Fatalf("view once in force: %+v, want flows at risk", v)
			}
			if logged := log.String(); !strings.Contains(logged, "level=WARN") || !strings.Contains(logged, "flows_at_risk=true") {
				t.Fatalf("log once in force:\n%s", logged)
			}
		})
	}
}
