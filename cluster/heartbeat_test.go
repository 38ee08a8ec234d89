package cluster

import (
	"bytes"
	"log/slog"
	"math/rand/v2"
	"net/netip"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestHeartbeatRoundTrip(t *testing.T) {
	hb := heartbeat{Name: "director2", Addr: "10.0.0.3:7946", Incarnation: 1 << 60, Seq: 42, Priority: 200, Ready: true,
		Heard: []uint64{1 << 61, 7}, VIPs: []vipClaim{{netip.MustParseAddr("10.0.0.50"), true}, {netip.MustParseAddr("fd00::50"), false}},
		SharesHealth: true, Down: []uint64{HealthID("web/10.0.0.11:80"), 1}}
	parts := hb.encode()
	if len(parts) != 1 {
		t.Fatalf("%d parts, want 1", len(parts))
	}
	got, err := decodeHeartbeat(parts[0])
	if err != nil {
		t.Fatal(err)
	}
	hb.Part, hb.Parts, hb.Version = 0, 1, hbVersionV3
	if !reflect.DeepEqual(got, hb) {
		t.Errorf("got %+v\nwant %+v", got, hb)
	}
}

// A VIP list and a health vote too long for one datagram are split; the
// peer reassembles them.
func TestHeartbeatParts(t *testing.T) {
	hb := heartbeat{Name: "d", Addr: "10.0.0.2:7946", Incarnation: 1, Seq: 7, Heard: make([]uint64, maxHeard), SharesHealth: true}
	for i := range 300 {
		hb.VIPs = append(hb.VIPs, vipClaim{netip.AddrFrom16([16]byte{0xfd, 14: byte(i >> 8), 15: byte(i)}), i%3 == 0})
	}
	for i := range MaxDown {
		hb.Down = append(hb.Down, uint64(i)<<32)
	}
	parts := hb.encode()
	if len(parts) < 5+MaxDown*8/hbMaxBytes {
		t.Fatalf("%d parts for 300 IPv6 VIPs and %d targets down", len(parts), MaxDown)
	}
	p := &peer{}
	var claims map[netip.Addr]bool
	var down map[uint64]bool
	// Newest first, as memberlist hands them over.
	for i := len(parts) - 1; i >= 0; i-- {
		if len(parts[i]) > hbMaxBytes {
			t.Errorf("part %d has %d bytes", i, len(parts[i]))
		}
		d, err := decodeHeartbeat(parts[i])
		if err != nil {
			t.Fatal(err)
		}
		if c := p.assemble(d); c != nil {
			if i != 0 {
				t.Fatalf("claims complete after part %d", i)
			}
			claims, down = c.claims, c.health
		}
	}
	if len(claims) != 300 || !claims[hb.VIPs[0].VIP] || claims[hb.VIPs[1].VIP] {
		t.Errorf("reassembled %d claims", len(claims))
	}
	if len(down) != MaxDown || !down[hb.Down[MaxDown-1]] {
		t.Errorf("reassembled %d targets down, want %d", len(down), MaxDown)
	}
	// An older heartbeat no longer changes the claims.
	old := hb
	old.Seq = 6
	d, _ := decodeHeartbeat(old.encode()[0])
	if p.assemble(d) != nil {
		t.Error("an older heartbeat replaced newer claims")
	}
}

// Damaged or foreign messages are errors, never a panic.
func TestHeartbeatGarbage(t *testing.T) {
	good := heartbeat{Name: "d", Addr: "a", Parts: 1, VIPs: []vipClaim{{netip.MustParseAddr("fd00::1"), true}}}.encode()[0]
	for n := range len(good) {
		if _, err := decodeHeartbeat(good[:n]); err == nil {
			t.Errorf("a heartbeat cut to %d of %d bytes decoded", n, len(good))
		}
	}
	r := rand.New(rand.NewPCG(1, 2))
	for range 10000 {
		b := make([]byte, r.IntN(64))
		for i := range b {
			b[i] = byte(r.IntN(256))
		}
		if len(b) > 0 && r.IntN(2) == 0 {
			b[0] = hbMagic
		}
		_, _ = decodeHeartbeat(b)
	}
}

// Every rule of the decoder, with the message it gives.
func TestHeartbeatDecodeErrors(t *testing.T) {
	good := heartbeat{Name: "d", Addr: "a", Heard: []uint64{9}, VIPs: []vipClaim{{netip.MustParseAddr("10.0.0.1"), true}}}.encode()[0]
	set := func(off int, v byte) []byte { b := bytes.Clone(good); b[off] = v; return b }
	heardAt := hbHeader + 2 + 2 // after the name "d" and the address "a"
	for _, tt := range []struct {
		name string
		b    []byte
		err  string
	}{
		{"relay message", []byte("S\x02"), "not a heartbeat"},
		{"version 2", set(1, 2), "heartbeat of version 2, this lvsd reads 3 and 4"},
		{"unknown flag", set(2, 8), "unknown flags 0x8"},
		{"health section missing", set(2, flagHealth), "truncated"},
		{"down count beyond the bytes", append(set(2, flagHealth), 0, 1, 0, 0, 0, 0, 0, 0, 0), "truncated"},
		{"part out of range", set(3, 1), "part 1 of 1"},
		{"no parts", set(4, 0), "part 0 of 0"},
		{"no name", append(append(bytes.Clone(good[:hbHeader]), 0), good[hbHeader+2:]...), "without a name"},
		{"too many echoes", set(heardAt, maxHeard+1), "echoes 33 incarnations"},
		{"claim count beyond the bytes", set(heardAt+1+8+1, 2), "truncated"},
		{"unknown claim flag", set(heardAt+1+8+2, 4), "unknown flags 0x4"},
		{"trailing bytes", append(bytes.Clone(good), 0), "1 bytes after the heartbeat"},
		{"oversized", append(bytes.Clone(good), make([]byte, hbMaxBytes)...), "at most 1100"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := decodeHeartbeat(tt.b)
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Fatalf("err = %v, want %q", err, tt.err)
			}
		})
	}
}

// FuzzDecodeHeartbeat: no input panics or allocates beyond its size, and
// what decodes encodes back to the same heartbeat.
func FuzzDecodeHeartbeat(f *testing.F) {
	f.Add(heartbeat{Name: "director2", Addr: "10.0.0.3:7946", Incarnation: 1 << 60, Seq: 42, Priority: -3, Ready: true,
		Heard: []uint64{5}, VIPs: []vipClaim{{netip.MustParseAddr("10.0.0.50"), true}, {netip.MustParseAddr("fd00::50"), false}}}.encode()[0])
	f.Add(heartbeat{Name: "d", Leaving: true}.encode()[0])
	f.Add(heartbeat{Name: "d", SharesHealth: true, Down: []uint64{7, 1 << 63}}.encode()[0])
	f.Add(heartbeat{Name: "d", Addr: "a", VIPs: []vipClaim{{netip.MustParseAddr("10.0.0.50"), true}}}.encodeAs(hbVersion, nil)[0])
	f.Add(heartbeat{Name: "d", Addr: "a", SharesHealth: true, Down: []uint64{7}}.encodeAs(hbVersion, fuzzKeys)[0])
	f.Add(withExtension(heartbeat{Name: "d", Addr: "a"}.encodeAs(hbVersion, nil)[0], 200, []byte("later")))
	drift := NewConfigDigest(1, map[string]uint64{"web": 1, "api": 2, "": 3})
	run, _ := runFrom(drift, 1)
	f.Add(heartbeat{Name: "d", Addr: "a", Config: advertOf(drift), ConfigRun: run}.encodeAs(hbVersion, fuzzKeys)[0])
	f.Add(heartbeat{Name: "d", Addr: "a", RestartHold: 20 * time.Second}.encodeAs(hbVersion, fuzzKeys)[0])
	f.Fuzz(func(t *testing.T, b []byte) {
		hb, err := decodeHeartbeat(b)
		if err != nil {
			return
		}
		if cap(hb.VIPs) > len(b) {
			t.Fatalf("%d claims allocated for %d bytes", cap(hb.VIPs), len(b))
		}
		var again heartbeat
		// Re-signed by another key: the signature itself is not compared.
		for i, p := range hb.encodeAs(hb.Version, fuzzKeys) {
			if len(p) > hbMaxBytes {
				t.Fatalf("part %d has %d bytes", i, len(p))
			}
			d, err := decodeHeartbeat(p)
			if err != nil {
				t.Fatalf("decoding part %d of the re-encoded heartbeat: %v", i, err)
			}
			d.VIPs = append(again.VIPs, d.VIPs...)
			d.Down = append(again.Down, d.Down...)
			again = d
		}
		again.Part, again.Parts = hb.Part, hb.Parts
		again.signed, again.sig, hb.signed, hb.sig = nil, nil, nil, nil
		if !reflect.DeepEqual(normal(again), normal(hb)) {
			t.Fatalf("round trip changed the heartbeat:\n%+v\n%+v", hb, again)
		}
	})
}

// normal makes empty and nil lists equal.
func normal(hb heartbeat) heartbeat {
	if len(hb.VIPs) == 0 {
		hb.VIPs = nil
	}
	if len(hb.Heard) == 0 {
		hb.Heard = nil
	}
	if len(hb.Down) == 0 {
		hb.Down = nil
	}
	return hb
}

// A heartbeat of another version is worth a warning (such directors never
// hear each other), once in a while; other garbage is not.
func TestHeartbeatOtherVersionWarns(t *testing.T) {
	var buf syncBuffer
	n := &Node{log: slog.New(slog.NewTextHandler(&buf, nil)), heartbeats: make(chan received, 4)}
	old := heartbeat{Name: "d", Addr: "a"}.encode()[0]
	old[1] = 2
	for range 3 {
		delegate{n}.NotifyMsg(old)
		delegate{n}.NotifyMsg([]byte("garbage"))
	}
	if got := strings.Count(buf.String(), "level=WARN"); got != 1 || !strings.Contains(buf.String(), "heartbeat of version 2, this lvsd reads 3 and 4") {
		t.Errorf("%d warnings:\n%s", got, buf.String())
	}
}
