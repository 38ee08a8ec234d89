package cluster

import (
	"math/rand/v2"
	"net/netip"
	"reflect"
	"testing"
)

func TestHeartbeatRoundTrip(t *testing.T) {
	hb := heartbeat{Name: "director2", Addr: "10.0.0.3:7946", Incarnation: 1 << 60, Seq: 42, Priority: 200, Ready: true,
		VIPs: []vipClaim{{netip.MustParseAddr("10.0.0.50"), true}, {netip.MustParseAddr("fd00::50"), false}}}
	parts := hb.encode()
	if len(parts) != 1 {
		t.Fatalf("%d parts, want 1", len(parts))
	}
	got, err := decodeHeartbeat(parts[0])
	if err != nil {
		t.Fatal(err)
	}
	hb.Part, hb.Parts = 0, 1
	if !reflect.DeepEqual(got, hb) {
		t.Errorf("got %+v\nwant %+v", got, hb)
	}
}

// A VIP list too long for one datagram is split; the peer reassembles it.
func TestHeartbeatParts(t *testing.T) {
	hb := heartbeat{Name: "d", Addr: "10.0.0.2:7946", Incarnation: 1, Seq: 7}
	for i := range 300 {
		hb.VIPs = append(hb.VIPs, vipClaim{netip.AddrFrom16([16]byte{0xfd, 14: byte(i >> 8), 15: byte(i)}), i%3 == 0})
	}
	parts := hb.encode()
	if len(parts) < 5 {
		t.Fatalf("%d parts for 300 IPv6 VIPs, want at least 5", len(parts))
	}
	p := &peer{}
	var claims map[netip.Addr]bool
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
			claims = c
		}
	}
	if len(claims) != 300 || !claims[hb.VIPs[0].VIP] || claims[hb.VIPs[1].VIP] {
		t.Errorf("reassembled %d claims", len(claims))
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
