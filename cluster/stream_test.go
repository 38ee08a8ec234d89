package cluster

import (
	"errors"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"testing"
	"time"
)

func startTestTransport(t *testing.T) (*transport, *portStats) {
	t.Helper()
	stats := &portStats{}
	tr, err := newTransport(netip.MustParseAddrPort("127.0.0.1:0"), slog.New(slog.DiscardHandler), stats)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tr.Shutdown() })
	return tr, stats
}

func dialTransport(t *testing.T, tr *transport) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", tr.tcp.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// TestStreamsPastTheLimitAreClosed holds more idle connections than the
// limit: memberlist gets maxStreams of them, the rest are closed at once
// and counted, and a slot freed by memberlist takes the next one.
func TestStreamsPastTheLimitAreClosed(t *testing.T) {
	tr, stats := startTestTransport(t)
	var got []net.Conn
	const extra = 8
	for range maxStreams + extra {
		dialTransport(t, tr)
	}
	deadline := time.After(5 * time.Second)
	for len(got) < maxStreams || stats.refusedStreams.Load() < extra {
		select {
		case c := <-tr.StreamCh():
			got = append(got, c)
		case <-deadline:
			t.Fatalf("%d streams handed over, %d refused; want %d and %d", len(got), stats.refusedStreams.Load(), maxStreams, extra)
		case <-time.After(10 * time.Millisecond):
		}
	}
	select {
	case <-tr.StreamCh():
		t.Fatal("a stream past the limit was handed over")
	case <-time.After(100 * time.Millisecond):
	}
	got[0].Close()
	dialTransport(t, tr)
	select {
	case <-tr.StreamCh():
	case <-time.After(5 * time.Second):
		t.Fatal("a freed slot did not take the next stream")
	}
}

// TestSilentStreamTimesOut: memberlist asks for a 3 s deadline, but a
// stream that sends nothing ends after firstBytesTimeout; one that sends
// gets memberlist's deadline.
func TestSilentStreamTimesOut(t *testing.T) {
	tr, stats := startTestTransport(t)
	dialTransport(t, tr)
	s := <-tr.StreamCh()
	defer s.Close()
	start := time.Now()
	if err := s.SetDeadline(start.Add(3 * time.Second)); err != nil {
		t.Fatal(err)
	}
	_, err := s.Read(make([]byte, 1))
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read of a silent stream: %v", err)
	}
	if took := time.Since(start); took > firstBytesTimeout+500*time.Millisecond {
		t.Errorf("a silent stream lasted %s, want about %s", took, firstBytesTimeout)
	}
	if n := stats.refusedStreams.Load(); n != 1 {
		t.Errorf("refused streams = %d, want 1", n)
	}

	c := dialTransport(t, tr)
	s2 := <-tr.StreamCh()
	defer s2.Close()
	if _, err := c.Write([]byte{1}); err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	if err := s2.SetDeadline(start.Add(1500 * time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	if _, err := s2.Read(make([]byte, 1)); err != nil {
		t.Fatal(err)
	}
	if _, err := s2.Read(make([]byte, 1)); !errors.Is(err, os.ErrDeadlineExceeded) || time.Since(start) < 1400*time.Millisecond {
		t.Errorf("after the first bytes: %v after %s, want memberlist's deadline (1.5 s)", err, time.Since(start))
	}
}

// TestLongStreamIsCut: memberlist reads at most maxStreamBytes of a stream.
func TestLongStreamIsCut(t *testing.T) {
	tr, stats := startTestTransport(t)
	c := dialTransport(t, tr)
	s := <-tr.StreamCh()
	defer s.Close()
	go func() {
		junk := make([]byte, 64<<10)
		for {
			if _, err := c.Write(junk); err != nil {
				return
			}
		}
	}()
	_ = s.SetDeadline(time.Now().Add(10 * time.Second))
	n, err := io.Copy(io.Discard, s)
	if !errors.Is(err, errStreamTooLong) || n != maxStreamBytes {
		t.Errorf("read %d bytes, %v; want %d and the stream cut", n, err, maxStreamBytes)
	}
	if got := stats.refusedStreams.Load(); got != 1 {
		t.Errorf("refused streams = %d, want 1", got)
	}
}
