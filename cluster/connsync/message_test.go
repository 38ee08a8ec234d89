package connsync

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"testing"
)

// TestBatching packs many records of mixed sizes and checks every message
// stays within one packet and gives back exactly what went in.
func TestBatching(t *testing.T) {
	var in []rec
	for i := range 500 {
		c := tcp4(fmt.Sprintf("198.51.%d.%d", i/250, i%250), uint16(i))
		switch i % 3 {
		case 1:
			c = tcp6(fmt.Sprintf("2001:db8::%x", i), uint16(i))
		case 2:
			c.seq = true
		}
		in = append(in, c.encode())
	}
	var msgs [][]byte
	b := peerB()
	b.stream = 1 // fresh broadcasts carry a stream number
	m := msgBuilder{from: b}
	for _, r := range in {
		if !m.fits(r) {
			msg, _ := m.finish(0, t0)
			msgs = append(msgs, msg)
		}
		m.add(r)
	}
	msg, _ := m.finish(0, t0)
	msgs = append(msgs, msg)

	var out []rec
	for i, msg := range msgs {
		if len(msg) > maxMessageLen {
			t.Fatalf("message %d is %d bytes", i, len(msg))
		}
		if i < len(msgs)-1 && len(msg) < maxMessageLen-recLenV6-3 {
			t.Errorf("message %d is only %d bytes: the next record would have fit", i, len(msg))
		}
		d, err := decodeMessage(msg)
		if err != nil || d.flags != 0 || !d.sent.Equal(t0) || d.sender != "b" || d.seq != uint64(i+1) {
			t.Fatalf("message %d: %+v, err %v", i, d, err)
		}
		out = append(out, d.recs...)
	}
	if len(out) != len(in) {
		t.Fatalf("%d records out of %d in %d messages", len(out), len(in), len(msgs))
	}
	for i := range in {
		if !bytes.Equal(in[i], out[i]) {
			t.Fatalf("record %d changed", i)
		}
	}
	t.Logf("%d records in %d messages", len(in), len(msgs))
}

// TestRecordsPerMessage documents how many records a message carries.
func TestRecordsPerMessage(t *testing.T) {
	for _, tt := range []struct {
		c    testConn
		name string
		want int
	}{
		{tcp4("198.51.100.7", 1), "lb1", 29},
		{tcp4("198.51.100.7", 1), "director-with-a-long-name.example.net", 28},
		{tcp4("198.51.100.7", 1), strings.Repeat("x", maxNameLen), 25},
		{tcp6("2001:db8::7", 1), "lb1", 14},
	} {
		m := msgBuilder{from: &origin{name: tt.name}}
		for m.fits(rec(tt.c.encode())) {
			m.add(tt.c.encode())
		}
		if m.n != tt.want {
			t.Errorf("%d records of %d bytes per message from %q, want %d", m.n, len(tt.c.encode()), tt.name, tt.want)
		}
	}
}

func TestDecodeMessage(t *testing.T) {
	// The rules of the version 3 layout, which version 4 keeps before its
	// trailer (TestDecodeMessageV4).
	one := func() []byte { return downgrade(peerB().message(flagReplay, t0, tcp4("198.51.100.7", 1).encode()), 3) }
	set := func(off int, v byte) []byte { b := one(); b[off] = v; return b }
	named := func(name string) []byte {
		return downgrade((&origin{name: name, incarnation: 1}).message(0, t0, tcp4("198.51.100.7", 1).encode()), 3)
	}
	hdr := headerLen("b")
	wantRecs := func(m message) int { // an end marker has none
		if m.flags&flagReplayEnd != 0 {
			return 0
		}
		return 1
	}
	endMarker := func() []byte {
		b, _ := (&msgBuilder{from: peerB()}).finish(flagReplay|flagReplayEnd, t0)
		return downgrade(b, 3)
	}
	tests := []struct {
		name string
		msg  []byte
		err  string
	}{
		{"valid", one(), ""},
		{"end of a replay", endMarker(), ""},
		{"empty", nil, "shorter than the header"},
		{"truncated header", one()[:28], "shorter than the header"},
		{"truncated name", one()[:msgFixed], "shorter than its 40-byte header"},
		{"truncated record", one()[:hdr+28], "past the end"},
		{"heartbeat magic", set(0, 'H'), "magic 0x48"},
		{"version 2", set(1, 2), "message version 2, this lvsd reads 3 and 4"},
		{"unknown flag", set(2, 0x81), "flags 0x81"},
		{"no records", set(3, 0), "without records"},
		{"end of a replay with records", set(2, flagReplay|flagReplayEnd), "end of a replay with records"},
		{"no records, end flag alone", func() []byte { b := set(3, 0); b[2] = flagReplayEnd; return b[:hdr] }(), "flags 0x2"},
		{"no sender", set(offNameLen, 0), "sender name of 0 bytes"},
		{"sender name too long", set(offNameLen, maxNameLen+1), "sender name of 129 bytes"},
		{"sender name past the end", append(one()[:offNameLen], 120), "message of 37 bytes is shorter than its 160-byte header"},
		{"control character in the name", named("b\n"), `sender name "b\n" is not printable`},
		{"not UTF-8", named("b\xff"), "not printable UTF-8"},
		{"non-zero padding", set(msgFixed+1, 1), "non-zero padding"},
		{"count above records", set(3, 2), "record 1 at byte 36: truncated"},
		{"trailing bytes", append(one(), 0, 0, 0, 0), "after the last"},
		{"oversized", append(one(), make([]byte, maxMessageLen)...), "above 1100"},
		{"bad record", set(hdr+offProto, 1), "protocol 1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := decodeMessage(tt.msg)
			if tt.err == "" {
				if err != nil || m.flags&flagReplay == 0 || !m.sent.Equal(t0) || len(m.recs) != wantRecs(m) || m.sender != "b" ||
					m.incarnation != 1 || m.seq != 1 {
					t.Fatalf("%+v, err %v", m, err)
				}
				return
			}
			if err == nil || !errors.Is(err, errInvalid) || !strings.Contains(err.Error(), tt.err) {
				t.Fatalf("err = %v, want one containing %q", err, tt.err)
			}
		})
	}
}

// FuzzDecodeMessage checks that no relay message panics the decoder, that
// a valid one encodes back to itself and makes a datagram the kernel
// parser accepts.
func FuzzDecodeMessage(f *testing.F) {
	f.Add(peerB().message(0, t0, tcp4("198.51.100.7", 1).encode(), tcp6("2001:db8::7", 1).encode()))
	f.Add(peerB().message(flagReplay, t0, testConn{proto: protoIP, flags: connFTemplate, caddr: netip.MustParseAddr("198.51.100.7"),
		vaddr: netip.AddrFrom4([4]byte{0x10, 0, 0, 1}), daddr: netip.MustParseAddr("10.0.0.5")}.encode()))
	f.Add(peerB().message(flagReplay|flagReplayEnd, t0))
	f.Add((&origin{name: "b", incarnation: 1, stream: 9}).summaryMessage(t0))
	f.Add((&origin{name: "b", incarnation: 1, stream: 9}).requestMessage(request{5, []seqRange{{1, 2}, {4, 4}}}, t0))
	f.Add([]byte("Hello"))
	f.Add(downgrade(peerB().message(0, t0, tcp4("198.51.100.7", 1).encode()), 3))
	signer := &origin{name: "b", incarnation: 1, keys: testKeys["b"]}
	f.Add(signer.message(0, t0, tcp4("198.51.100.7", 1).encode()))
	f.Add(signer.summaryMessage(t0))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := decodeMessage(b)
		if err != nil {
			return
		}
		// Compared in version 3: a signature or an unknown extension is
		// not written again.
		b = downgrade(b, 3)
		if b == nil {
			t.Fatal("a valid message has no version 3")
		}
		o := &origin{name: m.sender, incarnation: m.incarnation, seq: m.seq - 1, stream: m.stream}
		switch m.flags {
		case 0:
			o.stream--
		case flagSummary:
			if again := downgrade(o.summaryMessage(m.sent), 3); !bytes.Equal(again, b) {
				t.Fatalf("re-encoded summary differs:\n% x\n% x", again, b)
			}
			return
		case flagRequest:
			if again := downgrade(o.requestMessage(m.request, m.sent), 3); !bytes.Equal(again, b) {
				t.Fatalf("re-encoded request differs:\n% x\n% x", again, b)
			}
			return
		}
		var recs [][]byte
		for _, r := range m.recs {
			recs = append(recs, r)
		}
		if again := downgrade(o.message(m.flags, m.sent, recs...), 3); !bytes.Equal(again, b) {
			t.Fatalf("re-encoded message differs:\n% x\n% x", again, b)
		}
		if len(m.recs) == 0 {
			return // the end of a replay: nothing for the backup daemon
		}
		var body []byte
		for _, r := range m.recs {
			body, _ = appendRecord(body, r)
		}
		d := appendDatagram(nil, 9, len(m.recs), body)
		if !bytes.Equal(d[syncHeaderLen:], b[headerLen(m.sender):]) || binary.BigEndian.Uint16(d[2:]) != uint16(len(d)) {
			t.Fatal("datagram body differs from the message's records")
		}
		if _, again, err := parseDatagram(d); err != nil || len(again) != len(m.recs) {
			t.Fatalf("datagram from a valid message: %v", err)
		}
	})
}
