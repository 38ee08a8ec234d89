package connsync

import (
	"bytes"
	"encoding/binary"
	"errors"
	"net/netip"
	"strings"
	"testing"
)

// TestEncodeLayout pins the test encoder to the kernel's struct
// ip_vs_sync_v4, so the parser tests are not checked against themselves.
func TestEncodeLayout(t *testing.T) {
	c := tcp4("198.51.100.7", 40000)
	c.fwmark = 0x0a0b0c0d
	want := []byte{
		0x00, 6, 0x00, 36, // type v4, TCP, version 0 | size 36
		0, 0, 0, 3, // flags: DROUTE
		0, 1, // state ESTABLISHED
		0x9c, 0x40, 0, 80, 0, 80, // cport 40000, vport 80, dport 80
		0x0a, 0x0b, 0x0c, 0x0d, // fwmark
		0, 0, 0x03, 0x84, // timeout 900 s
		198, 51, 100, 7, 192, 0, 2, 10, 10, 0, 0, 5, // caddr, vaddr, daddr
	}
	if got := c.encode(); !bytes.Equal(got, want) {
		t.Fatalf("encode\n got % x\nwant % x", got, want)
	}
	if n := len(tcp6("2001:db8::7", 1).encode()); n != 72 {
		t.Fatalf("IPv6 record is %d bytes, want 72 (sizeof struct ip_vs_sync_v6)", n)
	}
	seq := tcp4("198.51.100.7", 1)
	seq.seq = true
	if n := len(seq.encode()); n != 36+2+24 {
		t.Fatalf("record with seq option is %d bytes, want 62", n)
	}
}

func TestParseDatagram(t *testing.T) {
	v4, v6 := tcp4("198.51.100.7", 40000), tcp6("2001:db8::7", 40001)
	v4seq := v4
	v4seq.seq = true // 62 bytes: the next record needs 2 bytes of padding
	v6pe := v6
	v6pe.flags |= connFTemplate
	v6pe.proto, v6pe.cport, v6pe.peData, v6pe.peName = protoUDP, 0, "call-id-42", "sip"
	fwmarkTpl := testConn{proto: protoIP, flags: connFTemplate, vport: 0, fwmark: 7, timeout: 360,
		caddr: netip.MustParseAddr("198.51.100.0"), vaddr: netip.MustParseAddr("0.0.0.7"), daddr: netip.MustParseAddr("10.0.0.5")}
	udp := v4
	udp.proto, udp.state = protoUDP, 0
	sctp := v4
	sctp.proto, sctp.state = protoSCTP, 13

	tests := []struct {
		name string
		d    []byte
		want []testConn // nil when invalid
		err  string
	}{
		{name: "ipv4", d: datagram(5, v4.encode()), want: []testConn{v4}},
		{name: "ipv6", d: datagram(5, v6.encode()), want: []testConn{v6}},
		{name: "seq then ipv6 after padding", d: datagram(5, v4seq.encode(), v6.encode()), want: []testConn{v4seq, v6}},
		{name: "pe template", d: datagram(5, v6pe.encode(), v4.encode()), want: []testConn{v6pe, v4}},
		{name: "fwmark template", d: datagram(5, fwmarkTpl.encode()), want: []testConn{fwmarkTpl}},
		{name: "udp and sctp", d: datagram(5, udp.encode(), sctp.encode()), want: []testConn{udp, sctp}},
		{name: "empty", d: datagram(5), want: []testConn{}},

		{name: "short header", d: []byte{0, 5, 0, 4}, err: "shorter than the header"},
		{name: "size mismatch", d: append(datagram(5, v4.encode()), 0, 0, 0, 0), err: "header says"},
		{name: "version 0", d: patch(datagram(5, v4.encode()), 5, 0), err: "not a version 1"},
		{name: "reserved set", d: patch(datagram(5, v4.encode()), 0, 1), err: "not a version 1"},
		{name: "spare set", d: patch(datagram(5, v4.encode()), 7, 1), err: "not a version 1"},
		{name: "count above records", d: patch(datagram(5, v4.encode()), 4, 2), err: "record 1 at byte 36: truncated"},
		{name: "count below records", d: patch(datagram(5, v4.encode(), v4.encode()), 4, 1), err: "after the last"},
		{name: "record version", d: patch(datagram(5, v4.encode()), 8+2, 0x10), err: "record version 1"},
		{name: "record size past end", d: patch(datagram(5, v4.encode()), 8+3, 40), err: "past the end"},
		{name: "type", d: patch(datagram(5, v4.encode()), 8, 2), err: "type 0x2"},
		{name: "v6 flag on v4 record", d: patch(datagram(5, v4.encode()), 8, 1), err: "below the 72"},
		{name: "size below v4", d: datagram(5, v4.encode()[:30]), err: "past the end"},
		{name: "size 0", d: patch(datagram(5, v4.encode()), 8+3, 0), err: "size 0 is not within"},
		{name: "protocol", d: datagram(5, withProto(v4, 1).encode()), err: "protocol 1"},
		{name: "tcp state", d: datagram(5, withState(v4, 11).encode()), err: "state 11 of protocol 6"},
		{name: "udp state", d: datagram(5, withState(udp, 1).encode()), err: "state 1 of protocol 17"},
		{name: "sctp state", d: datagram(5, withState(sctp, 14).encode()), err: "state 14 of protocol 132"},
		{name: "template protocol", d: datagram(5, withProto(fwmarkTpl, 50).encode()), err: "template of protocol 50"},
		{name: "padding not zero", d: patch(datagram(5, v4seq.encode(), v4.encode()), 8+62, 1), err: "non-zero padding"},
		{name: "option length 0", d: datagram(5, withOpts(v4, 1, 0)), err: "length 0"},
		{name: "option past end", d: datagram(5, withOpts(v4, 1, 24, 0)), err: "length 24"},
		{name: "option header cut", d: datagram(5, withOpts(v4, 1)), err: "truncated"},
		{name: "seq option length", d: datagram(5, withOpts(v4, 1, 4, 0, 0, 0, 0)), err: "sequence option of 4"},
		{name: "seq twice", d: datagram(5, withOpts(v4seq, append([]byte{1, 24}, make([]byte, 24)...)...)), err: "option 1 twice"},
		{name: "unknown mandatory option", d: datagram(5, withOpts(v4, 5, 1, 0)), err: "unknown mandatory option 5"},
		{name: "pe data without name", d: datagram(5, withOpts(v4, 2, 1, 'x')), err: "without a name"},
		{name: "pe name too long", d: datagram(5, withOpts(v4, 2, 1, 'x', 3, 17, 'a', 'a', 'a', 'a', 'a', 'a', 'a', 'a', 'a', 'a', 'a', 'a', 'a', 'a', 'a', 'a', 'a')), err: "name of 17"},
		{name: "record too big to relay", d: datagram(5, withOpts(v4, bytes.Repeat([]byte{0x45, 254, 254: 0}, 5)...)), err: "size 1311 is not within 36..932"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			id, recs, err := parseDatagram(tt.d)
			if tt.err != "" {
				if err == nil || !errors.Is(err, errInvalid) || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("err = %v, want one containing %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if id != 5 || len(recs) != len(tt.want) {
				t.Fatalf("sync ID %d, %d records; want 5, %d", id, len(recs), len(tt.want))
			}
			for i, c := range tt.want {
				if !bytes.Equal(recs[i], c.encode()) {
					t.Errorf("record %d\n got % x\nwant % x", i, recs[i], c.encode())
				}
				if recs[i].vaddr() != c.vaddr || recs[i].timeout() != c.timeout {
					t.Errorf("record %d: vaddr %s timeout %d", i, recs[i].vaddr(), recs[i].timeout())
				}
			}
		})
	}
}

// TestOptionalParam checks that an unknown option flagged optional passes,
// as the kernel skips it.
func TestOptionalParam(t *testing.T) {
	if _, _, err := parseDatagram(datagram(1, withOpts(tcp4("198.51.100.7", 1), 0x45, 2, 0, 0))); err != nil {
		t.Fatal(err)
	}
}

func TestKey(t *testing.T) {
	a := tcp4("198.51.100.7", 40000)
	b := a
	b.state, b.timeout, b.daddr, b.dport = 4, 120, netip.MustParseAddr("10.0.0.6"), 81 // same connection, later state
	tpl := a
	tpl.flags |= connFTemplate
	other := a
	other.cport++
	v6 := tcp6("::ffff:198.51.100.7", 40000)
	pe1, pe2 := tpl, tpl
	pe1.peData, pe1.peName, pe2.peData, pe2.peName = "a", "sip", "b", "sip"
	k := func(c testConn) connKey { return rec(c.encode()).key() }
	if k(a) != k(b) {
		t.Error("an update of a connection has another key")
	}
	for name, c := range map[string]testConn{"template": tpl, "client port": other, "ipv6": v6, "pe data": pe1} {
		if k(c) == k(a) {
			t.Errorf("%s: same key as the connection", name)
		}
	}
	if k(pe1) == k(pe2) {
		t.Error("templates with different PE data share a key")
	}
}

func patch(b []byte, off int, v byte) []byte {
	b[off] = v
	return b
}

func withProto(c testConn, p uint8) testConn  { c.proto = p; return c }
func withState(c testConn, s uint16) testConn { c.state = s; return c }

// withOpts appends raw option bytes to c's record and fixes its size.
func withOpts(c testConn, opts ...byte) []byte {
	b := append(c.encode(), opts...)
	binary.BigEndian.PutUint16(b[2:], uint16(len(b)))
	return b
}

// FuzzParseDatagram checks that no input panics, and that what parses
// re-encodes to the same bytes: nothing is lost or invented on the way to
// the backup daemon.
func FuzzParseDatagram(f *testing.F) {
	v4, v6 := tcp4("198.51.100.7", 40000), tcp6("2001:db8::7", 40001)
	v4.seq = true
	v6.flags, v6.peData, v6.peName = connFTemplate, "id", "sip"
	f.Add(datagram(1, v4.encode(), v6.encode()))
	f.Add(datagram(1, tcp4("198.51.100.8", 1).encode()))
	f.Add(datagram(0))
	f.Fuzz(func(t *testing.T, b []byte) {
		id, recs, err := parseDatagram(b)
		if err != nil {
			if !errors.Is(err, errInvalid) {
				t.Fatalf("error %v does not wrap errInvalid", err)
			}
			return
		}
		var body []byte
		for _, r := range recs {
			r.key()
			body, _ = appendRecord(body, r)
		}
		if again := appendDatagram(nil, id, len(recs), body); !bytes.Equal(again, b) {
			t.Fatalf("re-encoded\n% x\nfrom\n% x", again, b)
		}
	})
}
