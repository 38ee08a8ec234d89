package cluster

import (
	"bytes"
	"io"
	"log"
	"log/slog"
	"net"
	"net/netip"
	"strconv"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
)

// freePort returns a port no one listens on at 127.0.0.1 (TCP and UDP).
func freePort(t testing.TB) int {
	t.Helper()
	for range 20 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		if u, err := net.ListenPacket("udp", "127.0.0.1:"+strconv.Itoa(port)); err == nil {
			u.Close()
			return port
		}
	}
	t.Fatal("no free port")
	return 0
}

// Two nodes on lvsd's own transport (what a director with cluster.bind
// uses): they join over TCP, hear each other's heartbeats and pass
// connection-sync messages, encrypted; a node leaves and stops cleanly.
func TestNodesOnOwnTransport(t *testing.T) {
	var peers []string
	for range 2 {
		peers = append(peers, "127.0.0.1:"+strconv.Itoa(freePort(t)))
	}
	var nodes []*Node
	for i, name := range []string{"a", "b"} {
		n, err := Start(Config{Name: name, Rules: Rules{Mode: ECMP}, Bind: peers[i], Peers: peers, Keys: [][]byte{testKey},
			Label: "test", HeartbeatInterval: 20 * time.Millisecond, FailureTimeout: 150 * time.Millisecond,
			StartupHold: 100 * time.Millisecond, Log: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := n.ml.LocalNode().Addr, true; !ok || n.Address() != peers[i] {
			t.Errorf("%s advertises %s, want its bind %s", name, n.Address(), peers[i])
		}
		nodes = append(nodes, n)
	}
	ra, rb := &syncRecorder{}, &syncRecorder{}
	nodes[0].SetSync(ra)
	nodes[1].SetSync(rb)
	ra.wait(t, "b heard by a", func(r *syncRecorder) bool { return r.lastIs("+b", 0) })
	if nodes[0].ml.NumMembers() != 2 {
		t.Errorf("a's memberlist has %d members, want 2 (a TCP join)", nodes[0].ml.NumMembers())
	}
	msg := append([]byte{SyncMagic}, bytes.Repeat([]byte{7}, 1000)...)
	nodes[0].SendTo("b", msg)
	rb.wait(t, "a's message at b", func(r *syncRecorder) bool { return len(r.msgs) == 1 && bytes.Equal(r.msgs[0], msg) })
	if err := nodes[1].Leave(t.Context(), nil); err != nil {
		t.Fatal(err)
	}
	ra.wait(t, "b gone for a", func(r *syncRecorder) bool { return r.lastIs("-b", 0) })
	if err := nodes[0].Leave(t.Context(), nil); err != nil {
		t.Fatal(err)
	}
}

// A wildcard bind keeps memberlist's own transport (it finds the address
// to advertise); an address bind gets lvsd's.
func TestNewTransportNeedsOneAddress(t *testing.T) {
	if _, err := newTransport(netip.MustParseAddrPort("0.0.0.0:7946"), slog.New(slog.DiscardHandler), &portStats{}); err == nil {
		t.Error("a transport on the wildcard address")
	}
}

// BenchmarkReceive is what receiving one heartbeat-sized UDP packet costs
// the transport (allocations per packet): memberlist's NetTransport
// allocates 64 KB for each.
func BenchmarkReceive(b *testing.B) {
	payload := bytes.Repeat([]byte{1}, 200)
	run := func(b *testing.B, packets <-chan *memberlist.Packet, port int) {
		c, err := net.Dial("udp", "127.0.0.1:"+strconv.Itoa(port))
		if err != nil {
			b.Fatal(err)
		}
		defer c.Close()
		b.ReportAllocs()
		b.ResetTimer()
		for range b.N {
			if _, err := c.Write(payload); err != nil {
				b.Fatal(err)
			}
			if p := <-packets; len(p.Buf) != len(payload) {
				b.Fatalf("%d bytes", len(p.Buf))
			}
		}
	}
	b.Run("memberlist.NetTransport", func(b *testing.B) {
		nt, err := memberlist.NewNetTransport(&memberlist.NetTransportConfig{BindAddrs: []string{"127.0.0.1"},
			Logger: log.New(io.Discard, "", 0)})
		if err != nil {
			b.Fatal(err)
		}
		defer nt.Shutdown()
		run(b, nt.PacketCh(), nt.GetAutoBindPort())
	})
	b.Run("lvsd", func(b *testing.B) {
		tr, err := newTransport(netip.MustParseAddrPort("127.0.0.1:0"), slog.New(slog.DiscardHandler), &portStats{})
		if err != nil {
			b.Fatal(err)
		}
		defer tr.Shutdown()
		run(b, tr.PacketCh(), tr.port())
	})
}
