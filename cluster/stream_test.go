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

// dialSending connects to tr and sends one byte, as a director does.
func dialSending(t *testing.T, tr *transport) net.Conn {
	t.Helper()
	c := dialTransport(t, tr)
	if _, err := c.Write([]byte{1}); err != nil {
		t.Fatal(err)
	}
	return c
}

// TestStreamsPastTheLimitAreClosed holds more connections than the limit
// (each sent a byte, then nothing): memberlist gets maxStreams of them,
// the rest are closed at once and counted, and a slot freed by memberlist
// takes the next one.
func TestStreamsPastTheLimitAreClosed(t *testing.T) {
	tr, stats := startTestTransport(t)
	var got []net.Conn
	const extra = 8
	for range maxStreams + extra {
		dialSending(t, tr)
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
	dialSending(t, tr)
	select {
	case <-tr.StreamCh():
	case <-time.After(5 * time.Second):
		t.Fatal("a freed slot did not take the next stream")
	}
}

// TestSilentAndEmptyStreamsNeverReachMemberlist: a stream that sends
// nothing is closed after firstBytesTimeout, one that ends at once (a
// director whose deadline passed after connecting) is closed too, both
// counted and neither handed to memberlist, which would log the empty one
// as a sender without the cluster's label. One that sends is handed over
// with its first byte, and memberlist's deadlines apply to it.
func TestSilentAndEmptyStreamsNeverReachMemberlist(t *testing.T) {
	tr, stats := startTestTransport(t)
	silent := dialTransport(t, tr)
	start := time.Now()
	_ = silent.SetReadDeadline(start.Add(5 * time.Second))
	if _, err := silent.Read(make([]byte, 1)); err != io.EOF {
		t.Fatalf("a silent stream: %v, want closed", err)
	}
	if took := time.Since(start); took < firstBytesTimeout-100*time.Millisecond || took > firstBytesTimeout+time.Second {
		t.Errorf("a silent stream lasted %s, want about %s", took, firstBytesTimeout)
	}
	dialTransport(t, tr).Close()
	for deadline := time.Now().Add(5 * time.Second); stats.refusedStreams.Load() < 2 && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	if n := stats.refusedStreams.Load(); n != 2 {
		t.Errorf("refused streams = %d, want 2", n)
	}
	select {
	case <-tr.StreamCh():
		t.Fatal("a silent or empty stream was handed to memberlist")
	default:
	}

	c := dialSending(t, tr)
	s := <-tr.StreamCh()
	defer s.Close()
	if _, err := c.Write([]byte{2}); err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	if err := s.SetDeadline(start.Add(1500 * time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 2)
	if _, err := io.ReadFull(s, got); err != nil || got[0] != 1 || got[1] != 2 {
		t.Fatalf("read %v, %v; want the bytes sent, [1 2]", got, err)
	}
	if _, err := s.Read(make([]byte, 1)); !errors.Is(err, os.ErrDeadlineExceeded) || time.Since(start) < 1400*time.Millisecond {
		t.Errorf("after the first bytes: %v after %s, want memberlist's deadline (1.5 s)", err, time.Since(start))
	}
}

// TestLongStreamIsCut: memberlist reads at most maxStreamBytes of a stream.
func TestLongStreamIsCut(t *testing.T) {
	tr, stats := startTestTransport(t)
	c := dialSending(t, tr)
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
