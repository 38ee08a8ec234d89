package cluster

import (
	"errors"
	"net"
	"sync"
	"time"
)

// Bounds of the TCP streams the cluster port accepts. memberlist reads a
// stream before it can authenticate it, and buffers up to 20 MB of it
// (maxPushStateBytes in its net.go) in a goroutine of its own, so without
// them a stranger holding many connections could make a director hold
// gigabytes.
const (
	// maxStreams is how many accepted streams memberlist may read at once;
	// the ones past it are closed at once. Directors open streams to join
	// and to exchange state every 30 s, one at a time per peer.
	maxStreams = 32
	// firstBytesTimeout is how long a stream may stay silent after it is
	// accepted: a director writes as soon as it connects.
	firstBytesTimeout = time.Second
	// maxStreamBytes is what memberlist may read of one stream. A
	// push-pull carries each member's name, address and a few numbers,
	// well under 200 bytes a member, so 1 MiB is thousands of directors;
	// the one state lvsd sends over streams, a configuration-sync record,
	// is bounded below it (configsync.MaxData).
	maxStreamBytes = 1 << 20
)

var errStreamTooLong = errors.New("cluster stream longer than a director sends")

// stream is an accepted connection as memberlist reads it: at most
// maxStreamBytes. It is handed to memberlist only once its first byte has
// come (awaitFirstByte), which it returns first. Closing it frees its
// slot. One goroutine (memberlist's handler of the stream) uses it.
type stream struct {
	net.Conn
	left    int64
	first   []byte // the byte awaitFirstByte read, until memberlist reads it
	refuse  func() // counts the stream refused: too long
	release func() // frees the slot
	once    sync.Once
	refused bool
}

// awaitFirstByte waits up to firstBytesTimeout for c's first byte. A
// stream that ends or stays silent before it is closed and counted
// (refuse) without reaching memberlist: memberlist would take one that
// ends at once for a sender without the cluster's label and log an
// authentication error, and a director does that when its own deadline
// passes between connecting and writing (a TCP probe on a busy host).
func awaitFirstByte(c net.Conn, now time.Time, refuse, release func()) (*stream, bool) {
	first := make([]byte, 1)
	_ = c.SetReadDeadline(now.Add(firstBytesTimeout))
	if n, _ := c.Read(first); n != 1 {
		refuse()
		release()
		c.Close()
		return nil, false
	}
	_ = c.SetReadDeadline(time.Time{})
	return &stream{Conn: c, left: maxStreamBytes - 1, first: first, refuse: refuse, release: release}, true
}

func (s *stream) Read(b []byte) (int, error) {
	if len(s.first) > 0 && len(b) > 0 {
		b[0], s.first = s.first[0], nil
		return 1, nil
	}
	if s.left <= 0 {
		if !s.refused {
			s.refused = true
			s.refuse()
		}
		return 0, errStreamTooLong
	}
	if int64(len(b)) > s.left {
		b = b[:s.left]
	}
	n, err := s.Conn.Read(b)
	s.left -= int64(n)
	return n, err
}

func (s *stream) Close() error {
	s.once.Do(s.release)
	return s.Conn.Close()
}
