package connsync

import (
	"bytes"
	"crypto/ed25519"
	"log/slog"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/lvsd/lvsd/cluster/identity"
)

// testKeys are the directors' keys of the identity tests, from fixed seeds.
var testKeys = func() map[string]*identity.Keys {
	out := map[string]*identity.Keys{}
	for i, name := range []string{"a", "b", "self"} {
		seed := bytes.Repeat([]byte{byte(i + 1)}, ed25519.SeedSize)
		out[name] = &identity.Keys{Private: ed25519.NewKeyFromSeed(seed)}
	}
	return out
}()

// enforcing is self's keys with cluster.directors listing a, b and self.
func enforcing() *identity.Keys {
	dirs := map[string][]ed25519.PublicKey{}
	for name, k := range testKeys {
		dirs[name] = []ed25519.PublicKey{identity.Public(k.Private)}
	}
	return &identity.Keys{Private: testKeys["self"].Private, Directors: dirs}
}

func TestMessageV4(t *testing.T) {
	rec := tcp4("198.51.100.7", 1).encode()
	signed := (&origin{name: "b", incarnation: 1, keys: testKeys["b"]}).message(flagReplay, t0, rec)
	unsigned := peerB().message(flagReplay, t0, rec)
	for _, tc := range []struct {
		name   string
		msg    []byte
		signed bool
	}{
		{"unsigned", unsigned, false},
		{"signed", signed, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, err := decodeMessage(tc.msg)
			if err != nil || m.version != msgVersion || (m.sig != nil) != tc.signed || m.flags != flagReplay || len(m.recs) != 1 {
				t.Fatalf("%+v, %v", m, err)
			}
			if tc.signed && !ed25519.Verify(identity.Public(testKeys["b"].Private), m.signed, m.sig) {
				t.Fatal("signature does not verify")
			}
			// The v3 form, for a director of the release before.
			old := downgrade(tc.msg, 3)
			m3, err := decodeMessage(old)
			if err != nil || m3.version != 3 || m3.sig != nil || m3.flags != flagReplay || !bytes.Equal(m3.recs[0], m.recs[0]) || len(old) != len(tc.msg)-2-len(m.sig) {
				t.Fatalf("downgraded: %+v, %v", m3, err)
			}
		})
	}
	// Unknown extensions are skipped; one running past its section is an error.
	body := unsigned[:len(unsigned)-2]
	if m, err := decodeMessage(append(bytes.Clone(body), 200, 2, 'x', 'y', 0, 4)); err != nil || len(m.recs) != 1 {
		t.Fatalf("an unknown extension was not skipped: %v", err)
	}
	if _, err := decodeMessage(append(bytes.Clone(body), 200, 9, 0, 2)); err == nil || !strings.Contains(err.Error(), "runs past") {
		t.Fatalf("an extension running past the extensions: %v", err)
	}
}

// A signed relay message leaves room for its signature: none is longer
// than maxMessageLen.
func TestSignedMessagesFit(t *testing.T) {
	e, tr, _ := testEngine(t, Config{Identity: testKeys["self"]})
	e.fromMaster(datagram(1, conns(60)...), t0)
	e.tick(t0.Add(time.Second))
	for _, s := range tr.messages() {
		if len(s.msg) > maxMessageLen {
			t.Fatalf("a signed message of %d bytes", len(s.msg))
		}
		m, err := decodeMessage(s.msg)
		if err != nil || m.sig == nil {
			t.Fatalf("%+v, %v", m, err)
		}
	}
}

// With cluster.directors, a relay message counts only if signed by the key
// listed under the sender it names.
func TestDeliverIdentities(t *testing.T) {
	rec := tcp4("198.51.100.1", 1).encode()
	from := func(name string, keys *identity.Keys) *origin { return &origin{name: name, incarnation: 1, keys: keys} }
	for _, tc := range []struct {
		name    string
		keys    *identity.Keys
		msg     []byte
		applied bool
		dropped func(Stats) uint64
	}{
		{"enforced: signed by the sender", enforcing(), from("b", testKeys["b"]).message(0, t0, rec), true, nil},
		{"enforced: unsigned", enforcing(), from("b", nil).message(0, t0, rec), false, func(s Stats) uint64 { return s.DroppedUnproven }},
		{"enforced: version 3", enforcing(), downgrade(from("b", testKeys["b"]).message(0, t0, rec), 3), false, func(s Stats) uint64 { return s.DroppedUnproven }},
		{"enforced: signed by another director", enforcing(), from("b", testKeys["a"]).message(0, t0, rec), false, func(s Stats) uint64 { return s.DroppedUnproven }},
		{"enforced: a name not listed", enforcing(), from("director", testKeys["a"]).message(0, t0, rec), false, func(s Stats) uint64 { return s.DroppedUnproven }},
		{"not enforced: unsigned", nil, from("b", nil).message(0, t0, rec), true, nil},
		{"not enforced: version 3", nil, downgrade(from("b", nil).message(0, t0, rec), 3), true, nil},
		{"incarnation 2^64-1", nil, (&origin{name: "b", incarnation: math.MaxUint64}).message(0, t0, rec), false, func(s Stats) uint64 { return s.DroppedFuture }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var logs strings.Builder
			e, _, w := testEngine(t, Config{Identity: tc.keys, Log: slog.New(slog.NewTextHandler(&logs, nil))})
			e.log = slog.New(slog.NewTextHandler(&logs, nil))
			for i := range 3 {
				msg := tc.msg
				if i > 0 { // the same sender's next messages: refusals logged once
					msg = bytes.Clone(msg)
				}
				e.deliver(msg, t0)
			}
			if got := len(w.written) > 0; got != tc.applied {
				t.Fatalf("applied %v, want %v", got, tc.applied)
			}
			if tc.dropped != nil {
				if n := tc.dropped(e.st.snapshot()); n != 3 {
					t.Fatalf("dropped %d of 3", n)
				}
				if warns := strings.Count(logs.String(), "level=WARN"); warns != 1 {
					t.Fatalf("%d warnings for 3 refusals:\n%s", warns, logs.String())
				}
			}
		})
	}
}

func TestDowngrade(t *testing.T) {
	msg := (&origin{name: "b", incarnation: 1, keys: testKeys["b"]}).summaryMessage(t0)
	if got := downgrade(msg, 4); !bytes.Equal(got, msg) {
		t.Error("a v4 peer got another message")
	}
	if got := downgrade(msg, 2); got != nil {
		t.Errorf("version 2: %x", got)
	}
	v3 := downgrade(msg, 3)
	if v3[1] != 3 || v3[2] != flagSummary || len(v3) != headerLen("b") {
		t.Errorf("version 3: %x", v3)
	}
	if got := downgrade(v3, 3); !bytes.Equal(got, v3) {
		t.Error("a v3 message changed")
	}
}
