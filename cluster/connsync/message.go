package connsync

import (
	"encoding/binary"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/lvsd/lvsd/cluster/identity"
)

// A relay message carries kernel records between directors as one
// memberlist user message:
//
//	0      'S' (the cluster dispatches user messages on this byte)
//	1      version, 3 or 4
//	2      flags: bit 0 = replayed from the sender's cache, bit 1 = the end
//	       of a replay to the receiver (catchup.go), bit 2 = a summary,
//	       bit 3 = a request (antientropy.go); a message with none is
//	       fresh records broadcast to every member; bit 4 (version 4) =
//	       signed
//	3      number of records, 1..255; 0 in an end marker and a summary;
//	       in a request, the number of ranges, 0..maxRequestRanges
//	4..11  sender's clock when sent, Unix nanoseconds, big endian
//	12..19 sender's incarnation: when its relay started, Unix nanoseconds
//	20..27 sequence number of the message in that incarnation, from 1
//	28..35 stream number: how many fresh broadcasts the sender had sent in
//	       that incarnation when it sent this one (a fresh broadcast's own
//	       number, from 1)
//	36     length of the sender's node name, 1..128
//	37..   the name, then zero bytes up to a multiple of 4
//	..     the records exactly as in a kernel datagram: each record as the
//	       kernel encodes it, the next starting at a multiple of 4 bytes,
//	       no padding after the last; or a request's body (antientropy.go)
//	..     version 4: the trailer of cluster/identity: extensions (TLVs a
//	       reader skips when it does not know their type), their length
//	       (2 bytes), and with bit 4 the Ed25519 signature of the sender
//	       over every byte before it (64 bytes)
//
// A relay always writes version 4; the cluster node sends a director that
// speaks version 3 only (the release before) the same message without
// the trailer (Relay.Downgrade).
//
// The whole message is sealed with the cluster key, so the sender's name,
// sequence and time are as authentic as the records: a receiver takes the
// sender from here, never from the network. The header is padded to a
// multiple of 4 bytes so that the records keep the kernel's alignment and a
// datagram for the backup daemon is its 8-byte header followed by the
// records unchanged.
const (
	msgMagic     = 'S'
	msgVersionV3 = 3
	msgVersion   = 4  // written; 3 read too
	msgFixed     = 37 // header bytes before the name
	offStream    = 28
	offNameLen   = 36
	maxNameLen   = 128
	// maxHeaderLen is the header with the longest name.
	maxHeaderLen = (msgFixed + maxNameLen + 3) &^ 3
	// maxMessageLen keeps a message in one encrypted memberlist UDP packet
	// (1400-byte buffer less memberlist's headers, AES-GCM and a label of
	// up to 64 bytes).
	maxMessageLen = 1100
	// maxRecords is what the count byte holds, and what the kernel header's
	// nr_conns holds.
	maxRecords = 255

	flagReplay    = 1
	flagReplayEnd = 2
	flagSummary   = 4
	flagRequest   = 8
	flagSigned    = 16
)

// origin is the sender every message of a relay names: its node name, the
// incarnation of its relay, and the sequence of its messages.
type origin struct {
	name        string
	incarnation uint64
	seq         uint64 // of the last message finished
	stream      uint64 // fresh broadcasts finished
	// keys signs the messages (nil: unsigned); what the trailer takes is
	// left out of the room for records.
	keys *identity.Keys
}

// room is how long a message may be before its trailer.
func (o *origin) room() int { return maxMessageLen - o.keys.TrailerRoom() }

// seal ends a message whose header and body are written with the v4
// trailer, signed when o signs.
func (o *origin) seal(msg []byte) []byte { return o.keys.Seal(msg) }

// headerLen is the length of a message header naming name: padded to a
// multiple of 4 bytes.
func headerLen(name string) int { return (msgFixed + len(name) + 3) &^ 3 }

// message is a decoded relay message.
type message struct {
	flags       byte
	sent        time.Time
	sender      string
	incarnation uint64
	seq         uint64
	stream      uint64
	recs        []rec   // aliasing the message
	request     request // of a request
	version     byte
	signed, sig []byte // what the signature signs, and it; nil when unsigned
}

// msgBuilder accumulates records into one relay message from from.
type msgBuilder struct {
	from *origin
	buf  []byte
	n    int
}

func (m *msgBuilder) empty() bool { return m.n == 0 }

// fits reports whether r can join the message.
func (m *msgBuilder) fits(r rec) bool {
	if m.buf == nil {
		return len(r) <= m.from.room()-headerLen(m.from.name)
	}
	return m.n < maxRecords && len(m.buf)+paddedLen(m.buf, r) <= m.from.room()
}

// add appends r, which must fit, and returns its copy in the message.
func (m *msgBuilder) add(r rec) rec {
	if m.buf == nil {
		m.buf = make([]byte, headerLen(m.from.name), maxMessageLen)
	}
	var c rec
	m.buf, c = appendRecord(m.buf, r)
	m.n++
	return c
}

// finish completes the message with the next sequence number of its origin
// and resets the builder. The returned slice is not reused.
func (m *msgBuilder) finish(flags byte, sent time.Time) (msg []byte, n int) {
	if m.buf == nil { // an end marker
		m.buf = make([]byte, headerLen(m.from.name))
	}
	msg, n = m.buf, m.n
	m.from.putHeader(msg, flags, byte(n), sent)
	msg = m.from.seal(msg)
	m.buf, m.n = nil, 0
	return msg, n
}

// putHeader numbers a message of o's and writes its header into msg,
// which has room for it.
func (o *origin) putHeader(msg []byte, flags, count byte, sent time.Time) {
	o.seq++
	if o.keys.Signs() {
		flags |= flagSigned
	}
	msg[0], msg[1], msg[2], msg[3] = msgMagic, msgVersion, flags, count
	binary.BigEndian.PutUint64(msg[4:], uint64(sent.UnixNano()))
	binary.BigEndian.PutUint64(msg[12:], o.incarnation)
	binary.BigEndian.PutUint64(msg[20:], o.seq)
	binary.BigEndian.PutUint64(msg[offStream:], o.stream)
	msg[offNameLen] = byte(len(o.name))
	copy(msg[msgFixed:], o.name)
}

// checkName accepts a node name as a message carries it: 1-128 bytes of
// UTF-8 without control characters.
func checkName(name string) error {
	if len(name) == 0 || len(name) > maxNameLen {
		return invalidf("sender name of %d bytes", len(name))
	}
	if !utf8.ValidString(name) || strings.ContainsFunc(name, unicode.IsControl) {
		return invalidf("sender name %q is not printable UTF-8", name)
	}
	return nil
}

// decodeMessage validates a relay message. What it accepts is exactly what
// a msgBuilder writes.
func decodeMessage(b []byte) (message, error) {
	var m message
	switch {
	case len(b) > maxMessageLen:
		return m, invalidf("message of %d bytes is above %d", len(b), maxMessageLen)
	case len(b) < msgFixed:
		return m, invalidf("message of %d bytes is shorter than the header", len(b))
	case b[0] != msgMagic:
		return m, invalidf("magic %#x", b[0])
	case b[1] != msgVersion && b[1] != msgVersionV3:
		return m, invalidf("message version %d, this lvsd reads %d and %d (a director more than one release apart)", b[1], msgVersionV3, msgVersion)
	}
	flags := b[2]
	if b[1] >= 4 {
		flags &^= flagSigned
	}
	switch {
	case flags != 0 && flags != flagReplay && flags != flagReplay|flagReplayEnd && flags != flagSummary && flags != flagRequest:
		return m, invalidf("flags %#x", b[2])
	case b[3] == 0 && (flags == 0 || flags == flagReplay):
		return m, invalidf("message without records")
	case b[3] != 0 && flags&flagReplayEnd != 0:
		return m, invalidf("end of a replay with records")
	case b[3] != 0 && flags == flagSummary:
		return m, invalidf("summary with records")
	case flags == 0 && binary.BigEndian.Uint64(b[offStream:]) == 0:
		return m, invalidf("fresh records without a stream number")
	case b[offNameLen] == 0 || b[offNameLen] > maxNameLen:
		return m, invalidf("sender name of %d bytes", b[offNameLen])
	}
	version := b[1]
	var signed, sig []byte
	if version >= 4 {
		var err error
		if b, signed, sig, err = identity.Open(b, b[2]&flagSigned != 0, msgFixed); err != nil {
			return m, invalidf("%v", err)
		}
	}
	nameEnd := msgFixed + int(b[offNameLen])
	hdr := (nameEnd + 3) &^ 3
	if len(b) < hdr {
		return m, invalidf("message of %d bytes is shorter than its %d-byte header", len(b), hdr)
	}
	name := b[msgFixed:nameEnd]
	for _, c := range b[nameEnd:hdr] {
		if c != 0 {
			return m, invalidf("non-zero padding after the sender name")
		}
	}
	if err := checkName(string(name)); err != nil {
		return m, err
	}
	m = message{
		version:     version,
		signed:      signed,
		sig:         sig,
		flags:       flags,
		sent:        time.Unix(0, int64(binary.BigEndian.Uint64(b[4:]))),
		sender:      string(name),
		incarnation: binary.BigEndian.Uint64(b[12:]),
		seq:         binary.BigEndian.Uint64(b[20:]),
		stream:      binary.BigEndian.Uint64(b[offStream:]),
	}
	var err error
	switch m.flags {
	case flagRequest:
		m.request, err = decodeRequest(b[hdr:], int(b[3]))
	case flagSummary:
		if len(b) != hdr {
			err = invalidf("summary of %d bytes, want %d", len(b), hdr)
		}
	default:
		m.recs, err = parseRecords(b[hdr:], int(b[3]), nil)
	}
	return m, err
}

// Downgrade returns msg, a message of this relay's, in wire version v for
// a director that reads no later one: version 3 is the same message
// without the trailer and its flag. It implements cluster.SyncDowngrader;
// nil: msg has no such version.
func (r *Relay) Downgrade(msg []byte, v byte) []byte { return downgrade(msg, v) }

func downgrade(msg []byte, v byte) []byte {
	if v >= msgVersion || len(msg) < msgFixed || msg[1] != msgVersion {
		return msg
	}
	if v != msgVersionV3 {
		return nil
	}
	body, _, _, err := identity.Open(msg, msg[2]&flagSigned != 0, msgFixed)
	if err != nil {
		return nil
	}
	out := append([]byte(nil), body...)
	out[1], out[2] = msgVersionV3, out[2]&^flagSigned
	return out
}
