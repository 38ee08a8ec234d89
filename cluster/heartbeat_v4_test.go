package cluster

import (
	"bytes"
	"crypto/ed25519"
	"encoding/binary"
	"encoding/hex"
	"log/slog"
	"math"
	"net/netip"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/lvsd/lvsd/cluster/identity"
)

var fuzzKeys = &identity.Keys{Private: ed25519.NewKeyFromSeed(make([]byte, 32))}

// withExtension adds one TLV to an unsigned v4 part.
func withExtension(p []byte, typ byte, value []byte) []byte {
	n := int(binary.BigEndian.Uint16(p[len(p)-2:]))
	out := append(bytes.Clone(p[:len(p)-2]), typ, byte(len(value)))
	out = append(out, value...)
	return binary.BigEndian.AppendUint16(out, uint16(n+2+len(value)))
}

// The v3 heartbeats of the release before identities, as its encoder wrote
// them: this build must read them, and write v3 the same, for a rolling
// upgrade.
var goldenV3 = []struct {
	hb  heartbeat
	hex string
}{
	{heartbeat{Name: "director-a", Addr: "10.0.0.2:7946", Incarnation: 1764900000123456789, Seq: 42, Priority: 150,
		Ready: true, Heard: []uint64{1764899999000000000, 7}, SharesHealth: true, Down: []uint64{0xdeadbeef, 3},
		VIPs: []vipClaim{{netip.MustParseAddr("192.0.2.10"), true}, {netip.MustParseAddr("2001:db8::10"), false}}},
		"4803050001187e2f3303720d15000000000000002a000000960a6469726563746f722d610d31302e302e302e323a3739343602187e2f32c07b7600" +
			"0000000000000007000201c000020a0220010db8000000000000000000000010000200000000deadbeef0000000000000003"},
	{heartbeat{Name: "b", Addr: "10.0.0.3:7946", Incarnation: 5, Seq: 1, Priority: -3, Leaving: true},
		"480302000100000000000000050000000000000001fffffffd01620d31302e302e302e333a37393436000000"},
}

func TestHeartbeatV3Golden(t *testing.T) {
	for _, g := range goldenV3 {
		want, _ := hex.DecodeString(g.hex)
		parts := g.hb.encodeAs(hbVersionV3, fuzzKeys) // v3 is never signed
		if len(parts) != 1 || !bytes.Equal(parts[0], want) {
			t.Errorf("%s: v3 encoding changed:\n got %x\nwant %x", g.hb.Name, parts, want)
		}
		got, err := decodeHeartbeat(want)
		if err != nil {
			t.Fatalf("%s: %v", g.hb.Name, err)
		}
		w := g.hb
		w.Parts, w.Version = 1, hbVersionV3
		if !reflect.DeepEqual(normal(got), normal(w)) {
			t.Errorf("decoded %+v\nwant %+v", got, w)
		}
	}
}

func TestHeartbeatV4(t *testing.T) {
	hb := goldenV3[0].hb
	for _, tc := range []struct {
		name   string
		keys   *identity.Keys
		signed bool
	}{
		{"unsigned", nil, false},
		{"no private key", &identity.Keys{}, false},
		{"signed", fuzzKeys, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			parts := hb.encodeAs(hbVersion, tc.keys)
			if len(parts) != 1 {
				t.Fatalf("%d parts", len(parts))
			}
			got, err := decodeHeartbeat(parts[0])
			if err != nil {
				t.Fatal(err)
			}
			if got.Version != hbVersion || (got.sig != nil) != tc.signed {
				t.Fatalf("version %d, signature %x", got.Version, got.sig)
			}
			if tc.signed && !ed25519.Verify(identity.Public(fuzzKeys.Private), got.signed, got.sig) {
				t.Fatal("the signature does not verify")
			}
			got.signed, got.sig = nil, nil
			w := hb
			w.Parts, w.Version = 1, hbVersion
			if !reflect.DeepEqual(normal(got), normal(w)) {
				t.Errorf("decoded %+v\nwant %+v", got, w)
			}
		})
	}
}

// A reader skips extensions it does not know; a malformed one is an error.
func TestHeartbeatV4Extensions(t *testing.T) {
	plain := heartbeat{Name: "d", Addr: "a", VIPs: []vipClaim{{netip.MustParseAddr("10.0.0.1"), true}}}.encodeAs(hbVersion, nil)[0]
	ext := withExtension(plain, 77, []byte("from a later release"))
	got, err := decodeHeartbeat(ext)
	if err != nil || got.Name != "d" || len(got.VIPs) != 1 {
		t.Fatalf("an unknown extension was not skipped: %+v, %v", got, err)
	}
	for _, tc := range []struct {
		name string
		b    []byte
		err  string
	}{
		{"extension runs past", append(bytes.Clone(plain[:len(plain)-2]), 77, 9, 0, 2), "runs past"},
		{"extensions longer than the part", append(bytes.Clone(plain[:len(plain)-2]), 0xff, 0xff), "extensions of 65535 bytes"},
		{"no extensions length", plain[:len(plain)-2], ""},
		{"signed flag without signature", func() []byte { b := bytes.Clone(plain); b[2] |= flagSigned; return b }(), "truncated"},
		{"signed flag in v3", func() []byte { b := heartbeat{Name: "d", Addr: "a"}.encode()[0]; b[2] |= flagSigned; return b }(), "unknown flags"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := decodeHeartbeat(tc.b); err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Fatalf("err %v, want %q", err, tc.err)
			}
		})
	}
}

// Signing takes room from the claims: every part stays within hbMaxBytes.
func TestHeartbeatV4PartsFit(t *testing.T) {
	hb := heartbeat{Name: strings.Repeat("n", maxNameLen), Addr: "[fd00::1]:7946", Heard: make([]uint64, maxHeard), SharesHealth: true}
	for i := range 300 {
		hb.VIPs = append(hb.VIPs, vipClaim{netip.AddrFrom16([16]byte{0xfd, 14: byte(i >> 8), 15: byte(i)}), true})
	}
	for i := range MaxDown {
		hb.Down = append(hb.Down, uint64(i))
	}
	for _, v := range []byte{hbVersionV3, hbVersion} {
		p := &peer{}
		var a *assembled
		parts := hb.encodeAs(v, fuzzKeys)
		for i, b := range parts {
			if len(b) > hbMaxBytes {
				t.Fatalf("v%d part %d has %d bytes", v, i, len(b))
			}
			d, err := decodeHeartbeat(b)
			if err != nil {
				t.Fatalf("v%d part %d: %v", v, i, err)
			}
			if d.Version == hbVersion && !ed25519.Verify(identity.Public(fuzzKeys.Private), d.signed, d.sig) {
				t.Fatalf("part %d: bad signature", i)
			}
			a = p.assemble(d)
		}
		if a == nil || len(a.claims) != 300 || len(a.health) != MaxDown {
			t.Fatalf("v%d: reassembled %+v", v, a)
		}
	}
}

// The v3 and v4 parts of one heartbeat split the claims differently; a
// peer that gets both assembles each version on its own.
func TestAssembleDoesNotMixVersions(t *testing.T) {
	hb := heartbeat{Name: "d", Addr: "a", Seq: 3}
	for i := range 120 {
		hb.VIPs = append(hb.VIPs, vipClaim{netip.AddrFrom16([16]byte{0xfd, 15: byte(i)}), true})
	}
	v3, v4 := hb.encodeAs(hbVersionV3, nil), hb.encodeAs(hbVersion, fuzzKeys)
	if len(v3) != 2 || len(v4) != 3 {
		t.Fatalf("%d v3 parts, %d v4 parts: the test wants them to differ", len(v3), len(v4))
	}
	p := &peer{}
	dec := func(b []byte) heartbeat { d, err := decodeHeartbeat(b); must(t, err); return d }
	if p.assemble(dec(v4[1])) != nil || p.assemble(dec(v3[0])) != nil {
		t.Fatal("assembled from one part each")
	}
	if a := p.assemble(dec(v3[1])); a == nil || len(a.claims) != 120 {
		t.Fatalf("v3 parts assembled to %+v", a)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func TestAdmit(t *testing.T) {
	a, _ := identity.Generate(nil)
	b, _ := identity.Generate(nil)
	now := time.Unix(1764900000, 0)
	enforced := &identity.Keys{Private: a, Directors: map[string][]ed25519.PublicKey{"a": {identity.Public(a)}, "b": {identity.Public(b)}}}
	decoded := func(hb heartbeat, v byte, k ed25519.PrivateKey) heartbeat {
		d, err := decodeHeartbeat(hb.encodeAs(v, &identity.Keys{Private: k})[0])
		must(t, err)
		return d
	}
	fromB := heartbeat{Name: "b", Addr: "10.0.0.3:7946", Incarnation: uint64(now.UnixNano()), Seq: 1}
	future := fromB
	future.Incarnation = math.MaxUint64
	tomorrow := fromB
	tomorrow.Incarnation = uint64(now.Add(23 * time.Hour).UnixNano())
	asC := fromB
	asC.Name = "c"
	for _, tc := range []struct {
		name   string
		keys   *identity.Keys
		hb     heartbeat
		ok     bool
		reason string
	}{
		{"no identities: v3", nil, decoded(fromB, hbVersionV3, nil), true, ""},
		{"no identities: v4 signed by anyone", nil, decoded(fromB, hbVersion, a), true, ""},
		{"no identities: incarnation 2^64-1", nil, decoded(future, hbVersion, nil), false, refusedFuture},
		{"incarnation within a day", nil, decoded(tomorrow, hbVersionV3, nil), true, ""},
		{"enforced: signed by its key", enforced, decoded(fromB, hbVersion, b), true, ""},
		{"enforced: v3", enforced, decoded(fromB, hbVersionV3, nil), false, "unsigned"},
		{"enforced: v4 unsigned", enforced, decoded(fromB, hbVersion, nil), false, "unsigned"},
		{"enforced: signed by another director", enforced, decoded(fromB, hbVersion, a), false, "bad signature"},
		{"enforced: unknown name", enforced, decoded(asC, hbVersion, b), false, "unknown name"},
		{"enforced: 2^64-1 signed by its key", enforced, decoded(future, hbVersion, b), false, refusedFuture},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var buf syncBuffer
			n := &Node{cfg: Config{Identity: tc.keys}, log: slog.New(slog.NewTextHandler(&buf, nil))}
			for range 3 {
				if got := n.admit(tc.hb, now); got != tc.ok {
					t.Fatalf("admit %v, want %v", got, tc.ok)
				}
			}
			got := n.refused.snapshot()
			if tc.ok && got != nil || !tc.ok && got[tc.reason] != 3 {
				t.Fatalf("refused %v, want 3 %q", got, tc.reason)
			}
			if warns := strings.Count(buf.String(), "level=WARN"); !tc.ok && warns != 1 {
				t.Fatalf("%d warnings for 3 refusals, want 1:\n%s", warns, buf.String())
			}
		})
	}
}

func TestVersionsFor(t *testing.T) {
	enforced := &identity.Keys{Directors: map[string][]ed25519.PublicKey{}}
	at := time.Now()
	for _, tc := range []struct {
		name  string
		keys  *identity.Keys
		heard []heartbeat
		want  []byte
		sync  byte
	}{
		{"nothing heard: both", nil, nil, []byte{3, 4}, 3},
		{"heard v3", nil, []heartbeat{{Incarnation: 1, Version: 3}}, []byte{3}, 3},
		{"heard v3 then v4", nil, []heartbeat{{Incarnation: 1, Version: 3}, {Incarnation: 1, Version: 4}}, []byte{4}, 4},
		{"v4 stays while the incarnation does", nil, []heartbeat{{Incarnation: 1, Version: 4}, {Incarnation: 1, Version: 3}}, []byte{4}, 4},
		{"restarted with the release before", nil, []heartbeat{{Incarnation: 1, Version: 4}, {Incarnation: 2, Version: 3}}, []byte{3}, 3},
		{"enforced: v4 only", enforced, nil, []byte{4}, 4},
		{"enforced: v4 even to a v3 sender", enforced, []heartbeat{{Incarnation: 1, Version: 3}}, []byte{4}, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := &Node{cfg: Config{Identity: tc.keys, FailureTimeout: time.Second}}
			n.st.init(n)
			s := &n.st
			for _, hb := range tc.heard {
				hb.Addr = "10.0.0.3:7946"
				s.noteVersion(hb, at)
			}
			if got := s.versionsFor("10.0.0.3:7946"); !bytes.Equal(got, tc.want) {
				t.Errorf("versionsFor %v, want %v", got, tc.want)
			}
			if got := s.syncVersion("10.0.0.3:7946"); got != tc.sync {
				t.Errorf("syncVersion %d, want %d", got, tc.sync)
			}
		})
	}
}
