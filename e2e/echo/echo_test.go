package echo_test

import (
	"context"
	"fmt"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/lvsd/lvsd/e2e/echo"
	"github.com/lvsd/lvsd/e2e/topo"
)

var cfg = echo.Config{TCP: []uint16{80, 8080}, HTTP: []uint16{8000}, UDP: []uint16{5353}}

// serve starts an echo server named after the host, closed at test end.
func serve(t *testing.T, h *topo.Host) *echo.Server {
	t.Helper()
	s, err := echo.Serve(context.Background(), h, h.ID, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func port(proto string) uint16 {
	switch proto {
	case echo.HTTP:
		return 8000
	case echo.UDP:
		return 5353
	}
	return 8080
}

// TestDirect reaches both real servers from several client sources over
// both families and all protocols, and checks name, peer and local address.
func TestDirect(t *testing.T) {
	tp := topo.New(t, topo.WithClientSources(4))
	servers := map[string]*echo.Server{"rs1": serve(t, tp.RS(1)), "rs2": serve(t, tp.RS(2))}
	ctx := context.Background()
	var wg sync.WaitGroup
	for _, v6 := range []bool{false, true} {
		srcs := append([]netip.Addr{tp.Client().Addr(v6)}, tp.ClientSources(v6)...)
		for _, rs := range []*topo.Host{tp.RS(1), tp.RS(2)} {
			for _, proto := range []string{echo.TCP, echo.UDP, echo.HTTP} {
				for _, src := range srcs {
					wg.Add(1)
					go func() { // in parallel: Ask must be safe for that
						defer wg.Done()
						dst := netip.AddrPortFrom(rs.Addr(v6), port(proto))
						r, err := echo.Ask(ctx, tp.Client(), src, dst, proto)
						if err != nil {
							t.Error(err)
							return
						}
						if r.Name != rs.ID || r.Peer.Addr() != src || r.Local != dst {
							t.Errorf("%s %s -> %s: got %+v", proto, src, dst, r)
						}
						if want := (proto == echo.TCP); r.PeerName.IsValid() != want || want && r.PeerName != r.Peer {
							t.Errorf("%s %s -> %s: getpeername %v beside accept's %v", proto, src, dst, r.PeerName, r.Peer)
						}
					}()
				}
			}
		}
	}
	wg.Wait()
	for id, s := range servers {
		for _, proto := range []string{echo.TCP, echo.UDP, echo.HTTP} {
			seen := s.Seen(proto)
			if len(seen) != 10 {
				t.Errorf("%s %s: %d peers seen, want 10: %v", id, proto, len(seen), seen)
			}
			for a, n := range seen {
				if n != 1 {
					t.Errorf("%s %s: %s seen %d times", id, proto, a, n)
				}
			}
		}
		if n := len(s.Seen("")); n != 10 {
			t.Errorf("%s: %d peers in total", id, n)
		}
	}
	servers["rs1"].ResetSeen()
	if n := len(servers["rs1"].Seen("")); n != 0 {
		t.Errorf("after reset: %d", n)
	}
}

// TestVIPOnLo mimics DR: the VIP lives on the real server's lo and the
// client routes it via the real server. Answers must come from the VIP,
// UDP included (a connected client socket drops anything else).
func TestVIPOnLo(t *testing.T) {
	tp := topo.New(t, topo.WithClientSources(2))
	serve(t, tp.RS(1))
	ctx := context.Background()
	for _, v6 := range []bool{false, true} {
		vip := netip.MustParsePrefix("10.0.0.50/32")
		if v6 {
			vip = netip.MustParsePrefix("fd00::50/128")
		}
		if err := tp.RS(1).AddAddr(vip, "lo"); err != nil {
			t.Fatal(err)
		}
		if err := tp.Client().AddRoute(vip, tp.RS(1).Addr(v6)); err != nil {
			t.Fatal(err)
		}
		src := tp.ClientSources(v6)[1]
		for _, proto := range []string{echo.TCP, echo.UDP, echo.HTTP} {
			dst := netip.AddrPortFrom(vip.Addr(), port(proto))
			r, err := echo.Ask(ctx, tp.Client(), src, dst, proto)
			if err != nil || r.Name != "rs1" || r.Local != dst || r.Peer.Addr() != src {
				t.Errorf("%s via VIP %s: %+v %v", proto, dst, r, err)
			}
		}
	}
}

func TestStopStartHealth(t *testing.T) {
	tp := topo.New(t, topo.WithClientSources(0))
	s := serve(t, tp.RS(1))
	ctx := context.Background()
	client := tp.Client()
	health := func() (int, error) {
		c, err := client.Dial(ctx, "tcp", netip.Addr{}, netip.AddrPortFrom(tp.RS(1).V4, 8000))
		if err != nil {
			return 0, err
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(3 * time.Second))
		fmt.Fprintf(c, "GET /healthz HTTP/1.0\r\n\r\n")
		var code int
		_, err = fmt.Fscanf(c, "HTTP/1.0 %d", &code)
		return code, err
	}
	if code, err := health(); code != 200 {
		t.Errorf("healthz: %d %v", code, err)
	}
	s.SetHealthy(false)
	if code, err := health(); code != 503 {
		t.Errorf("healthz unhealthy: %d %v", code, err)
	}
	s.SetHealthy(true)

	// A long-lived connection keeps working until its port is stopped.
	dst := netip.AddrPortFrom(tp.RS(1).V6, 80)
	conn, err := echo.Connect(ctx, client, netip.Addr{}, dst)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if conn.Hello.Name != "rs1" || conn.Hello.Peer.Addr() != client.V6 {
		t.Errorf("hello: %+v", conn.Hello)
	}
	for i := 0; i < 3; i++ {
		if err := conn.Echo(ctx, fmt.Sprintf("ping %d", i)); err != nil {
			t.Fatal(err)
		}
	}

	if err := s.Stop(echo.HTTP, 8000); err != nil {
		t.Fatal(err)
	}
	if _, err := health(); err == nil {
		t.Error("health check succeeded on a stopped port")
	}
	if err := s.Stop(echo.TCP, 80); err != nil {
		t.Fatal(err)
	}
	if err := conn.Echo(ctx, "after stop"); err == nil {
		t.Error("connection survived Stop")
	}
	if _, err := echo.Ask(ctx, client, netip.Addr{}, dst, echo.TCP); err == nil {
		t.Error("stopped TCP port answered")
	}
	if err := s.Stop(echo.TCP, 80); err == nil {
		t.Error("double Stop succeeded")
	}
	// Other ports are untouched.
	if _, err := echo.Ask(ctx, client, netip.Addr{}, netip.AddrPortFrom(tp.RS(1).V4, 8080), echo.TCP); err != nil {
		t.Error(err)
	}

	for _, p := range []struct {
		proto string
		port  uint16
	}{{echo.HTTP, 8000}, {echo.TCP, 80}} {
		if err := s.Start(p.proto, p.port); err != nil {
			t.Fatal(err)
		}
		if r, err := echo.Ask(ctx, client, netip.Addr{}, netip.AddrPortFrom(tp.RS(1).V4, p.port), p.proto); err != nil || r.Name != "rs1" {
			t.Errorf("after restart %s/%d: %+v %v", p.proto, p.port, r, err)
		}
	}
	if err := s.Start(echo.TCP, 80); err == nil {
		t.Error("double Start succeeded")
	}

	s.Close()
	short, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	defer cancel()
	for _, proto := range []string{echo.TCP, echo.HTTP, echo.UDP} {
		if _, err := echo.Ask(short, client, netip.Addr{}, netip.AddrPortFrom(tp.RS(1).V4, port(proto)), proto); err == nil {
			t.Errorf("%s answered after Close", proto)
		}
	}
	if err := s.Start(echo.TCP, 80); err == nil {
		t.Error("Start after Close succeeded")
	}
}

func TestServeContext(t *testing.T) {
	tp := topo.New(t, topo.WithClientSources(0))
	ctx, cancel := context.WithCancel(context.Background())
	s, err := echo.Serve(ctx, tp.RS(2), "x", echo.Config{TCP: []uint16{80}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	dst := netip.AddrPortFrom(tp.RS(2).V4, 80)
	if _, err := echo.Ask(context.Background(), tp.Client(), netip.Addr{}, dst, echo.TCP); err != nil {
		t.Fatal(err)
	}
	cancel()
	deadline := time.Now().Add(3 * time.Second)
	for {
		_, err := echo.Ask(context.Background(), tp.Client(), netip.Addr{}, dst, echo.TCP)
		if err != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("still answering after ctx was cancelled")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if _, err := echo.Serve(ctx, tp.RS(2), "bad name", echo.Config{}); err == nil {
		t.Error("name with a space accepted")
	}
}

func TestParse(t *testing.T) {
	good := map[string]echo.Reply{
		"name=rs1 peer=10.0.0.100:41234 local=10.0.0.50:80\n": {
			Name: "rs1", Peer: netip.MustParseAddrPort("10.0.0.100:41234"), Local: netip.MustParseAddrPort("10.0.0.50:80")},
		"  name=rs2 local=[fd00::50]:53 peer=[fd00::100]:1 extra=1": {
			Name: "rs2", Peer: netip.MustParseAddrPort("[fd00::100]:1"), Local: netip.MustParseAddrPort("[fd00::50]:53")},
		"name=rs3 peer=10.0.0.200:5 local=10.0.0.3:80 peername=10.0.0.100:41234": {
			Name: "rs3", Peer: netip.MustParseAddrPort("10.0.0.200:5"), Local: netip.MustParseAddrPort("10.0.0.3:80"),
			PeerName: netip.MustParseAddrPort("10.0.0.100:41234")},
	}
	for line, want := range good {
		got, err := echo.Parse(line)
		if err != nil || got != want {
			t.Errorf("Parse(%q) = %+v, %v", line, got, err)
		}
		if again, err := echo.Parse(got.String()); err != nil || again != got {
			t.Errorf("round trip of %q: %+v %v", got.String(), again, err)
		}
	}
	for _, line := range []string{"", "name=rs1", "name=rs1 peer=x local=10.0.0.1:1", "hello", "rs1: hi"} {
		if r, err := echo.Parse(line); err == nil {
			t.Errorf("Parse(%q) = %+v, want error", line, r)
		}
	}
}
