package connsync

import (
	"encoding/binary"
	"time"
)

// A relay message carries kernel records between directors as one
// memberlist user message:
//
//	0      'S' (the cluster dispatches user messages on this byte)
//	1      version, 1
//	2      flags: bit 0 = replayed from the sender's cache
//	3      number of records, 1..255
//	4..11  sender's clock when sent, Unix nanoseconds, big endian
//	12..   the records exactly as in a kernel datagram: each record as the
//	       kernel encodes it, the next starting at a multiple of 4 bytes,
//	       no padding after the last
//
// The header is a multiple of 4 bytes long so that the records keep the
// kernel's alignment and a datagram for the backup daemon is its 8-byte
// header followed by the records unchanged.
const (
	msgMagic     = 'S'
	msgVersion   = 1
	msgHeaderLen = 12
	// maxMessageLen keeps a message in one encrypted memberlist UDP packet
	// (1400-byte buffer less memberlist's headers, AES-GCM and label).
	maxMessageLen = 1100
	// maxRecords is what the count byte holds, and what the kernel header's
	// nr_conns holds.
	maxRecords = 255

	flagReplay = 1
	knownFlags = flagReplay
)

// msgBuilder accumulates records into one relay message.
type msgBuilder struct {
	buf []byte
	n   int
}

func (m *msgBuilder) empty() bool { return m.n == 0 }

// fits reports whether r can join the message.
func (m *msgBuilder) fits(r rec) bool {
	if m.buf == nil {
		return len(r) <= maxMessageLen-msgHeaderLen
	}
	return m.n < maxRecords && len(m.buf)+paddedLen(m.buf, r) <= maxMessageLen
}

// add appends r, which must fit, and returns its copy in the message.
func (m *msgBuilder) add(r rec) rec {
	if m.buf == nil {
		m.buf = make([]byte, msgHeaderLen, maxMessageLen)
	}
	var c rec
	m.buf, c = appendRecord(m.buf, r)
	m.n++
	return c
}

// finish completes the message and resets the builder. The returned slice
// is not reused.
func (m *msgBuilder) finish(flags byte, sent time.Time) (msg []byte, n int) {
	msg, n = m.buf, m.n
	msg[0], msg[1], msg[2], msg[3] = msgMagic, msgVersion, flags, byte(n)
	binary.BigEndian.PutUint64(msg[4:], uint64(sent.UnixNano()))
	m.buf, m.n = nil, 0
	return msg, n
}

// decodeMessage validates a relay message and returns its records, which
// alias b.
func decodeMessage(b []byte) (flags byte, sent time.Time, recs []rec, err error) {
	switch {
	case len(b) > maxMessageLen:
		return 0, sent, nil, invalidf("message of %d bytes is above %d", len(b), maxMessageLen)
	case len(b) < msgHeaderLen:
		return 0, sent, nil, invalidf("message of %d bytes is shorter than the header", len(b))
	case b[0] != msgMagic:
		return 0, sent, nil, invalidf("magic %#x", b[0])
	case b[1] != msgVersion:
		return 0, sent, nil, invalidf("message version %d", b[1])
	case b[2]&^knownFlags != 0:
		return 0, sent, nil, invalidf("flags %#x", b[2])
	case b[3] == 0:
		return 0, sent, nil, invalidf("message without records")
	}
	sent = time.Unix(0, int64(binary.BigEndian.Uint64(b[4:])))
	recs, err = parseRecords(b[msgHeaderLen:], int(b[3]), nil)
	return b[2], sent, recs, err
}
