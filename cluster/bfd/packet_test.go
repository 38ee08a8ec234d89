package bfd

import (
	"bytes"
	"encoding/hex"
	"errors"
	"strings"
	"testing"
)

func mustHex(t testing.TB, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(strings.ReplaceAll(s, " ", ""))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestParsePacket(t *testing.T) {
	cases := []struct {
		name    string
		hex     string
		want    Packet
		wantErr error
		errText string
	}{
		{name: "up", hex: "20 c0 03 18 00000001 00000002 000186a0 000186a0 00000000",
			want: Packet{State: Up, DetectMult: 3, MyDiscriminator: 1, YourDiscriminator: 2,
				DesiredMinTxInterval: 100_000, RequiredMinRxInterval: 100_000}},
		{name: "down with diag and no your discriminator", hex: "21 40 05 18 0000abcd 00000000 000f4240 000186a0 00000000",
			want: Packet{State: Down, Diag: DiagDetectionExpired, DetectMult: 5, MyDiscriminator: 0xabcd,
				DesiredMinTxInterval: 1_000_000, RequiredMinRxInterval: 100_000}},
		{name: "poll", hex: "20 e0 03 18 00000001 00000002 000186a0 000186a0 00000000",
			want: Packet{State: Up, Poll: true, DetectMult: 3, MyDiscriminator: 1, YourDiscriminator: 2,
				DesiredMinTxInterval: 100_000, RequiredMinRxInterval: 100_000}},
		{name: "final, cpi, trailing padding ignored", hex: "20 d8 03 18 00000001 00000002 000186a0 000186a0 00000032 0000",
			want: Packet{State: Up, Final: true, ControlPlaneIndependent: true, DetectMult: 3, MyDiscriminator: 1,
				YourDiscriminator: 2, DesiredMinTxInterval: 100_000, RequiredMinRxInterval: 100_000,
				RequiredMinEchoRxInterval: 50}},
		{name: "short", hex: "20 c0 03 18 00000001", wantErr: ErrMalformed, errText: "8 bytes"},
		{name: "version 0", hex: "00 c0 03 18 00000001 00000002 000186a0 000186a0 00000000", wantErr: ErrMalformed, errText: "version 0"},
		{name: "length below 24", hex: "20 c0 03 17 00000001 00000002 000186a0 000186a0 00000000", wantErr: ErrMalformed, errText: "length field 23"},
		{name: "length beyond payload", hex: "20 c0 03 1a 00000001 00000002 000186a0 000186a0 00000000", wantErr: ErrMalformed, errText: "> 24 bytes"},
		{name: "detect mult 0", hex: "20 c0 00 18 00000001 00000002 000186a0 000186a0 00000000", wantErr: ErrMalformed, errText: "multiplier 0"},
		{name: "multipoint", hex: "20 c1 03 18 00000001 00000002 000186a0 000186a0 00000000", wantErr: ErrMalformed, errText: "multipoint"},
		{name: "my discriminator 0", hex: "20 c0 03 18 00000000 00000002 000186a0 000186a0 00000000", wantErr: ErrMalformed, errText: "my discriminator 0"},
		{name: "your discriminator 0 in up", hex: "20 c0 03 18 00000001 00000000 000186a0 000186a0 00000000", wantErr: ErrMalformed, errText: "your discriminator 0 in state up"},
		{name: "your discriminator 0 in init", hex: "20 80 03 18 00000001 00000000 000186a0 000186a0 00000000", wantErr: ErrMalformed, errText: "state init"},
		{name: "your discriminator 0 in admin down is fine", hex: "27 00 03 18 00000001 00000000 000186a0 000186a0 00000000",
			want: Packet{State: AdminDown, Diag: DiagAdminDown, DetectMult: 3, MyDiscriminator: 1,
				DesiredMinTxInterval: 100_000, RequiredMinRxInterval: 100_000}},
		{name: "poll and final", hex: "20 f0 03 18 00000001 00000002 000186a0 000186a0 00000000", wantErr: ErrMalformed, errText: "poll and final"},
		{name: "authentication", hex: "20 c4 03 1a 00000001 00000002 000186a0 000186a0 00000000 0102", wantErr: ErrAuthRequired},
		{name: "authentication too short", hex: "20 c4 03 18 00000001 00000002 000186a0 000186a0 00000000", wantErr: ErrMalformed, errText: "authentication section"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParsePacket(mustHex(t, tc.hex))
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) || !strings.Contains(err.Error(), tc.errText) {
					t.Fatalf("error %v, want %v containing %q", err, tc.wantErr, tc.errText)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
		})
	}
}

func TestPacketRoundTrip(t *testing.T) {
	for _, h := range []string{
		"20c0031800000001000000020001869f0001869f00000000",
		"2140051800000abc00000000000f4240000186a000000000",
		"27000318000000010000000000989680000186a000000000",
		"20e003180000000100000002000186a0000186a000000000",
		"20da0918ffffffffffffffffffffffffffffffffffffffff",
	} {
		b := mustHex(t, h)
		p, err := ParsePacket(b)
		if err != nil {
			t.Fatalf("%s: %v", h, err)
		}
		if out := p.Append(nil); !bytes.Equal(out, b) {
			t.Errorf("%s: re-encoded as %x", h, out)
		}
	}
}

// FuzzParsePacket: whatever the bytes, ParsePacket does not panic, and what
// it accepts re-encodes to the same 24 bytes and parses back equal.
func FuzzParsePacket(f *testing.F) {
	for _, h := range []string{
		"20c0031800000001000000020001869f0001869f00000000",
		"2140051800000abc00000000000f4240000186a000000000",
		"20c4031a00000001000000020001869f0001869f000000000102",
		"20f0031800000001000000020001869f0001869f00000000",
	} {
		f.Add(mustHex(f, h))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := ParsePacket(b)
		if err != nil {
			return
		}
		out := p.Append(nil)
		if len(out) != headerLen {
			t.Fatalf("encoded %d bytes", len(out))
		}
		// A longer Length without authentication is accepted (§6.8.6 only
		// bounds it) and ignored; the rest must match.
		want := append([]byte(nil), b[:headerLen]...)
		want[3] = headerLen
		if !bytes.Equal(out, want) {
			t.Fatalf("%x re-encoded as %x", b[:headerLen], out)
		}
		q, err := ParsePacket(out)
		if err != nil || q != p {
			t.Fatalf("round trip: %v, %v != %v", err, q, p)
		}
	})
}

func TestStrings(t *testing.T) {
	if Up.String() != "up" || State(9).String() != "state(9)" || DiagAdminDown.String() != "administratively-down" ||
		Diag(30).String() != "diag(30)" {
		t.Error("names")
	}
}
