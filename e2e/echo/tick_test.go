package echo_test

import (
	"context"
	"io"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/lvsd/lvsd/e2e/echo"
)

// TestTicks: the server greets, ticks unprompted and in order, and ends
// the connection when the client acks a tick it never sent.
func TestTicks(t *testing.T) {
	s, err := echo.ServeTicks(context.Background(), nil, "ticker", 0, 20*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	dst := netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), s.Addr().Port())
	c, err := echo.ConnectTicks(context.Background(), nil, netip.Addr{}, dst)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if c.Hello.Name != "ticker" || c.Hello.Local != dst {
		t.Errorf("greeting %+v", c.Hello)
	}
	c.SetDeadline(time.Now().Add(5 * time.Second))
	start := time.Now()
	for want := 1; want <= 5; want++ {
		n, err := c.Next()
		if err != nil || n != want {
			t.Fatalf("tick %d: got %d, %v", want, n, err)
		}
	}
	if d := time.Since(start); d < 80*time.Millisecond {
		t.Errorf("5 ticks of 20 ms came in %v", d)
	}

	// A second client acks tick 7 first: the server says why and hangs up.
	c2, err := echo.ConnectTicks(context.Background(), nil, netip.Addr{}, dst)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	c2.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(c2, "ack 7\n"); err != nil {
		t.Fatal(err)
	}
	rest, _ := io.ReadAll(c2)
	if !strings.Contains(string(rest), "error: got \"ack 7\"") {
		t.Errorf("after a wrong ack the server sent %q", rest)
	}
	if conns, bad := s.Served(); conns != 2 || bad != 1 {
		t.Errorf("Served() = %d, %d; want 2, 1", conns, bad)
	}
	if err := s.Close(); err != nil && !strings.Contains(err.Error(), "closed") {
		t.Errorf("Close: %v", err)
	}
	if _, err := c.Next(); err == nil {
		// Ticks already buffered may still be read; the connection must
		// end soon after.
		for i := 0; i < 100 && err == nil; i++ {
			_, err = c.Next()
		}
		if err == nil {
			t.Error("the connection still ticks after Close")
		}
	}
}

// TestTicksDrop: Drop ends the open connections; the server still accepts.
func TestTicksDrop(t *testing.T) {
	s, err := echo.ServeTicks(context.Background(), nil, "ticker", 0, 10*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	dst := netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), s.Addr().Port())
	c, err := echo.ConnectTicks(context.Background(), nil, netip.Addr{}, dst)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if n := s.Drop(); n != 1 {
		t.Errorf("Drop() = %d, want 1", n)
	}
	c.SetDeadline(time.Now().Add(5 * time.Second))
	var n int
	for err == nil && n < 1000 {
		_, err = c.Next()
		n++
	}
	if err == nil {
		t.Error("the connection still ticks after Drop")
	}
	c2, err := echo.ConnectTicks(context.Background(), nil, netip.Addr{}, dst)
	if err != nil {
		t.Fatalf("after Drop: %v", err)
	}
	c2.Close()
}
