package cluster

import (
	"errors"
	"net"
	"os"
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
// maxStreamBytes, the first ones within firstBytesTimeout whatever read
// deadline memberlist sets. Closing it frees its slot. One goroutine
// (memberlist's handler of the stream) uses it.
type stream struct {
	net.Conn
	left    int64
	firstBy time.Time // zero once the first bytes came
	asked   time.Time // the read deadline memberlist asked for
	refuse  func()    // counts the stream refused: silent or too long
	release func()    // frees the slot
	once    sync.Once
	refused bool
}

func newStream(c net.Conn, now time.Time, refuse, release func()) *stream {
	s := &stream{Conn: c, left: maxStreamBytes, firstBy: now.Add(firstBytesTimeout), refuse: refuse, release: release}
	_ = c.SetReadDeadline(s.firstBy)
	return s
}

func (s *stream) Read(b []byte) (int, error) {
	if s.left <= 0 {
		s.refuseOnce()
		return 0, errStreamTooLong
	}
	if int64(len(b)) > s.left {
		b = b[:s.left]
	}
	n, err := s.Conn.Read(b)
	s.left -= int64(n)
	if n > 0 && !s.firstBy.IsZero() {
		s.firstBy = time.Time{}
		_ = s.Conn.SetReadDeadline(s.asked)
	}
	if err != nil && n == 0 && !s.firstBy.IsZero() && errors.Is(err, os.ErrDeadlineExceeded) {
		s.refuseOnce()
	}
	return n, err
}

func (s *stream) refuseOnce() {
	if !s.refused {
		s.refused = true
		s.refuse()
	}
}

func (s *stream) SetDeadline(t time.Time) error {
	if err := s.Conn.SetWriteDeadline(t); err != nil {
		return err
	}
	return s.SetReadDeadline(t)
}

// SetReadDeadline keeps the first bytes' deadline while they have not come.
func (s *stream) SetReadDeadline(t time.Time) error {
	s.asked = t
	d := t
	if !s.firstBy.IsZero() && (t.IsZero() || s.firstBy.Before(t)) {
		d = s.firstBy
	}
	return s.Conn.SetReadDeadline(d)
}

func (s *stream) Close() error {
	s.once.Do(s.release)
	return s.Conn.Close()
}
