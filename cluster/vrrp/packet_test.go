package vrrp

import (
	"errors"
	"net/netip"
	"slices"
	"testing"
)

var (
	srcV4 = netip.MustParseAddr("10.0.0.11")
	srcV6 = netip.MustParseAddr("fe80::11")
)

func TestAdvertRoundTrip(t *testing.T) {
	tests := []struct {
		name     string
		src, dst netip.Addr
		a        Advert
	}{
		{"IPv4, one VIP", srcV4, GroupV4, Advert{VRID: 51, Priority: 100, Interval: 10, Addresses: []netip.Addr{netip.MustParseAddr("10.0.0.50")}}},
		{"IPv4, stop", srcV4, GroupV4, Advert{VRID: 1, Priority: 0, Interval: 4095, Addresses: []netip.Addr{netip.MustParseAddr("10.0.0.50"), netip.MustParseAddr("10.0.0.51")}}},
		{"IPv6", srcV6, GroupV6, Advert{VRID: 255, Priority: 254, Interval: 100, Addresses: []netip.Addr{netip.MustParseAddr("fd00::50")}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := tt.a.Marshal(tt.src, tt.dst)
			if err != nil {
				t.Fatal(err)
			}
			got, err := Parse(b, tt.src, tt.dst, TTL)
			if err != nil {
				t.Fatal(err)
			}
			if got.VRID != tt.a.VRID || got.Priority != tt.a.Priority || got.Interval != tt.a.Interval || !slices.Equal(got.Addresses, tt.a.Addresses) {
				t.Errorf("round trip: got %+v, want %+v", got, tt.a)
			}
		})
	}
}

// TestAdvertWireFormat pins the bytes of RFC 5798 section 5.1 with the
// IPv4 pseudo-header checksum keepalived computes for VRRPv3.
func TestAdvertWireFormat(t *testing.T) {
	a := Advert{VRID: 51, Priority: 150, Interval: 10, Addresses: []netip.Addr{netip.MustParseAddr("10.0.0.50")}}
	b, err := a.Marshal(srcV4, GroupV4)
	if err != nil {
		t.Fatal(err)
	}
	// Sum of the pseudo-header (0a00 000b e000 0012 0070 000c) and the
	// message (3133 9601 000a 0000 0a00 0032) folded, complemented.
	want := []byte{0x31, 51, 150, 1, 0x00, 0x0a, 0, 0, 10, 0, 0, 50}
	var sum uint32
	for _, w := range []uint32{0x0a00, 0x000b, 0xe000, 0x0012, 0x0070, 0x000c, 0x3133, 0x9601, 0x000a, 0x0a00, 0x0032} {
		sum += w
	}
	for sum > 0xffff {
		sum = sum>>16 + sum&0xffff
	}
	want[6], want[7] = byte(^sum>>8), byte(^sum)
	if !slices.Equal(b, want) {
		t.Errorf("got % x, want % x", b, want)
	}
}

func TestParseDrops(t *testing.T) {
	good, err := Advert{VRID: 7, Priority: 100, Interval: 100, Addresses: []netip.Addr{netip.MustParseAddr("10.0.0.50")}}.Marshal(srcV4, GroupV4)
	if err != nil {
		t.Fatal(err)
	}
	with := func(f func(b []byte) []byte) []byte { return f(slices.Clone(good)) }
	tests := []struct {
		name string
		b    []byte
		ttl  int
		src  netip.Addr
		want error
	}{
		{"TTL 254: from beyond the link", good, 254, srcV4, ErrTTL},
		{"short", good[:7], TTL, srcV4, ErrShort},
		{"version 2", with(func(b []byte) []byte { b[0] = 0x21; return b }), TTL, srcV4, ErrVersion},
		{"type 2", with(func(b []byte) []byte { b[0] = 0x32; return b }), TTL, srcV4, ErrType},
		{"no address", with(func(b []byte) []byte { b[3] = 0; return b }), TTL, srcV4, ErrNoAddress},
		{"count beyond the packet", with(func(b []byte) []byte { b[3] = 2; return b }), TTL, srcV4, ErrLength},
		{"trailing bytes", append(slices.Clone(good), 0, 0, 0, 0), TTL, srcV4, ErrLength},
		{"checksum", with(func(b []byte) []byte { b[2]++; return b }), TTL, srcV4, ErrChecksum},
		{"another source: pseudo-header differs", good, TTL, netip.MustParseAddr("10.0.0.12"), ErrChecksum},
		{"IPv6 source, IPv4 group", good, TTL, srcV6, ErrFamily},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := Parse(tt.b, tt.src, GroupV4, tt.ttl); !errors.Is(err, tt.want) {
				t.Errorf("got %v, want %v", err, tt.want)
			}
		})
	}
}

func TestMarshalRefuses(t *testing.T) {
	v := []netip.Addr{netip.MustParseAddr("10.0.0.50")}
	for name, a := range map[string]Advert{
		"no address":     {VRID: 1, Priority: 1, Interval: 1},
		"interval 0":     {VRID: 1, Priority: 1, Addresses: v},
		"interval 4096":  {VRID: 1, Priority: 1, Interval: 4096, Addresses: v},
		"another family": {VRID: 1, Priority: 1, Interval: 1, Addresses: []netip.Addr{netip.MustParseAddr("fd00::1")}},
	} {
		if _, err := a.Marshal(srcV4, GroupV4); err == nil {
			t.Errorf("%s: marshalled", name)
		}
	}
}

// FuzzParse: any bytes from the network are either refused or decode to an
// advertisement that encodes back to the same bytes.
func FuzzParse(f *testing.F) {
	good, _ := Advert{VRID: 7, Priority: 100, Interval: 100, Addresses: []netip.Addr{netip.MustParseAddr("10.0.0.50")}}.Marshal(srcV4, GroupV4)
	f.Add(good, false)
	good6, _ := Advert{VRID: 7, Priority: 100, Interval: 100, Addresses: []netip.Addr{netip.MustParseAddr("fd00::50")}}.Marshal(srcV6, GroupV6)
	f.Add(good6, true)
	f.Add([]byte{0x31, 1, 1, 255, 0, 1, 0, 0}, false)
	f.Fuzz(func(t *testing.T, b []byte, v6 bool) {
		src, dst := srcV4, GroupV4
		if v6 {
			src, dst = srcV6, GroupV6
		}
		a, err := Parse(b, src, dst, TTL)
		if err != nil {
			return
		}
		if len(a.Addresses) == 0 || len(a.Addresses) > 255 {
			t.Fatalf("parsed %d addresses", len(a.Addresses))
		}
		out, err := a.Marshal(src, dst)
		if err != nil {
			t.Fatalf("a parsed advertisement does not encode: %v", err)
		}
		// Reserved bits are ignored on receipt and sent as zero.
		in := slices.Clone(b)
		in[4] &= 0x0f
		if _, err := Parse(out, src, dst, TTL); err != nil || !slices.Equal(out[8:], in[8:]) || !slices.Equal(out[:4], in[:4]) {
			t.Fatalf("round trip: % x → % x (%v)", b, out, err)
		}
	})
}
