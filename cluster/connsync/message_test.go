package connsync

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
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
	var m msgBuilder
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
		flags, sent, recs, err := decodeMessage(msg)
		if err != nil || flags != 0 || !sent.Equal(t0) {
			t.Fatalf("message %d: flags %d, sent %v, err %v", i, flags, sent, err)
		}
		out = append(out, recs...)
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
		want int
	}{
		{tcp4("198.51.100.7", 1), 30},
		{tcp6("2001:db8::7", 1), 15},
	} {
		var m msgBuilder
		for m.fits(rec(tt.c.encode())) {
			m.add(tt.c.encode())
		}
		if m.n != tt.want {
			t.Errorf("%d records of %d bytes per message, want %d", m.n, len(tt.c.encode()), tt.want)
		}
	}
}

func TestDecodeMessage(t *testing.T) {
	one := func() []byte {
		var m msgBuilder
		m.add(tcp4("198.51.100.7", 1).encode())
		msg, _ := m.finish(flagReplay, t0)
		return msg
	}
	set := func(off int, v byte) []byte { b := one(); b[off] = v; return b }
	tests := []struct {
		name string
		msg  []byte
		err  string
	}{
		{"valid", one(), ""},
		{"empty", nil, "shorter than the header"},
		{"truncated header", one()[:11], "shorter than the header"},
		{"truncated record", one()[:40], "past the end"},
		{"heartbeat magic", set(0, 'H'), "magic 0x48"},
		{"version 2", set(1, 2), "message version 2"},
		{"unknown flag", set(2, 0x81), "flags 0x81"},
		{"no records", set(3, 0), "without records"},
		{"count above records", set(3, 2), "record 1 at byte 36: truncated"},
		{"trailing bytes", append(one(), 0, 0, 0, 0), "after the last"},
		{"oversized", append(one(), make([]byte, maxMessageLen)...), "above 1100"},
		{"bad record", set(msgHeaderLen+offProto, 1), "protocol 1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			flags, sent, recs, err := decodeMessage(tt.msg)
			if tt.err == "" {
				if err != nil || flags != flagReplay || !sent.Equal(t0) || len(recs) != 1 {
					t.Fatalf("flags %d, sent %v, %d records, err %v", flags, sent, len(recs), err)
				}
				return
			}
			if err == nil || !errors.Is(err, errInvalid) || !strings.Contains(err.Error(), tt.err) {
				t.Fatalf("err = %v, want one containing %q", err, tt.err)
			}
		})
	}
}

// FuzzDecodeMessage checks that no relay message panics the decoder and
// that a valid one makes a datagram the kernel parser accepts.
func FuzzDecodeMessage(f *testing.F) {
	var m msgBuilder
	m.add(tcp4("198.51.100.7", 1).encode())
	m.add(tcp6("2001:db8::7", 1).encode())
	msg, _ := m.finish(0, t0)
	f.Add(msg)
	f.Add([]byte("Hello"))
	f.Fuzz(func(t *testing.T, b []byte) {
		_, _, recs, err := decodeMessage(b)
		if err != nil {
			return
		}
		var body []byte
		for _, r := range recs {
			body, _ = appendRecord(body, r)
		}
		d := appendDatagram(nil, 9, len(recs), body)
		if !bytes.Equal(d[syncHeaderLen:], b[msgHeaderLen:]) || binary.BigEndian.Uint16(d[2:]) != uint16(len(d)) {
			t.Fatal("datagram body differs from the message's records")
		}
		if _, again, err := parseDatagram(d); err != nil || len(again) != len(recs) {
			t.Fatalf("datagram from a valid message: %v", err)
		}
	})
}
