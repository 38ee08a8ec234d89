//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"net/netip"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/lvsd/lvsd/e2e/echo"
	"github.com/lvsd/lvsd/e2e/topo"
)

// TestRestartKeepsConnections: lvsd killed with SIGKILL leaves the kernel
// as it was, so established connections go on without it; a new lvsd on the
// same configuration and state adopts what it finds and applies no op at
// all. Clients echo every 100 ms over long-lived connections through the
// kill and the restart without a single error, on the same server.
func TestRestartKeepsConnections(t *testing.T) {
	tp := topo.New(t, topo.WithClientSources(8))
	vip := netip.MustParseAddr("10.0.0.50")
	rs1, rs2 := tp.RS(1), tp.RS(2)
	holdVIPOnLoopback(t, vip, rs1, rs2)
	serveEcho(t, echo.Config{TCP: []uint16{80}}, rs1, rs2)
	director := tp.Director(1)
	d := newDirector(t, director, map[string]string{"web": fmt.Sprintf(
		"service: web\nvip: %s\nports: [80]\nforwarding: dr\nbackends:\n  - {address: %s}\n  - {address: %s}\n",
		vip, rs1.V4, rs2.V4)})
	d.start()
	d.waitServices(1, 2)
	// waitServices sees the last destination, maybe before the VIP address
	// and the ownership record: wait for the end of the first reconcile.
	d.waitLog(0, 10*time.Second, "msg=reconciled")
	saved := ipvsSave(t, director)
	addrs := addrsOf(t, director)
	if !slices.Contains(addrs, netip.PrefixFrom(vip, 32)) {
		t.Fatalf("the VIP is not on the director's %s: %v", director.Link, addrs)
	}

	// Streams: one long-lived connection per source, one echo every 100 ms.
	sources := tp.ClientSources(false)[:4]
	streams := make([]*stream, len(sources))
	for i, src := range sources {
		conn, err := echo.Connect(context.Background(), tp.Client(), src, netip.AddrPortFrom(vip, 80))
		if err != nil {
			t.Fatal(err)
		}
		streams[i] = startStream(conn)
	}
	defer func() {
		for _, s := range streams {
			s.stop()
		}
	}()
	servers := map[string]int{}
	for _, s := range streams {
		servers[s.conn.Hello.Name]++
	}
	t.Logf("%d long-lived connections on %v", len(streams), servers)
	waitEchoes(t, streams, 2)

	// kill -9: no chance to clean anything up (lvsd never does anyway).
	if err := d.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-d.exited
	if got := ipvsSave(t, director); got != saved {
		t.Errorf("after kill -9 ipvsadm -Sn changed:\nbefore:\n%s\nafter:\n%s", saved, got)
	}
	// Without any lvsd the kernel alone carries the connections.
	waitEchoes(t, streams, 3)

	// Restart on the same configuration and state folder; its own log, so
	// everything in it is the new process's.
	r := &lvsd{t: t, host: director, dir: d.dir, logf: filepath.Join(d.dir, "lvsd-restarted.log")}
	r.start()
	started := r.waitLog(0, 10*time.Second, "msg=starting")
	if !strings.Contains(started, "owned_services=1") {
		t.Errorf("the restarted lvsd did not adopt its ownership record: %s", started)
	}
	// The first barrier proves the initial reconcile is over, the second
	// the reconcile after the first reload.
	r.barrier()
	r.barrier()
	waitEchoes(t, streams, 3)
	if ops := appliedOps(r.log()); len(ops) > 0 {
		t.Errorf("the restarted lvsd applied ops, want none:\n%s", formatOps(ops))
	}
	if got := ipvsSave(t, director); got != saved {
		t.Errorf("after the restart ipvsadm -Sn changed:\nbefore:\n%s\nafter:\n%s", saved, got)
	}
	if got := addrsOf(t, director); !slices.Equal(got, addrs) {
		t.Errorf("after the restart the director's addresses are %v, were %v", got, addrs)
	}

	for i, s := range streams {
		n, err := s.stop()
		if err != nil {
			t.Errorf("connection from %s (on %s) failed after %d echoes: %v", sources[i], s.conn.Hello.Name, n, err)
		} else {
			t.Logf("connection from %s on %s: %d echoes, no error", sources[i], s.conn.Hello.Name, n)
		}
	}
	// And the restarted agent's service takes new connections.
	checkReplies(t, ask(t, tp.Client(), tp.ClientSources(false)[4:], netip.AddrPortFrom(vip, 80), echo.TCP, 2), vip)
}

// stream echoes over one connection every 100 ms until stopped or the
// first error. Echo checks every answer comes from the server that greeted.
type stream struct {
	conn *echo.Conn
	done chan struct{}
	wg   sync.WaitGroup

	mu  sync.Mutex
	n   int
	err error
}

func startStream(conn *echo.Conn) *stream {
	s := &stream{conn: conn, done: make(chan struct{})}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-s.done:
				return
			case <-tick.C:
			}
			err := conn.Echo(context.Background(), fmt.Sprintf("ping %d", i))
			s.mu.Lock()
			if err != nil {
				s.err = err
			} else {
				s.n++
			}
			s.mu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	return s
}

func (s *stream) count() (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.n, s.err
}

// stop ends the stream (idempotent), closes the connection and returns the
// number of answered echoes and the first error.
func (s *stream) stop() (int, error) {
	select {
	case <-s.done:
	default:
		close(s.done)
	}
	s.wg.Wait()
	s.conn.Close()
	return s.count()
}

// waitEchoes waits until every stream has answered n more echoes, failing
// at the first stream error.
func waitEchoes(t *testing.T, streams []*stream, n int) {
	t.Helper()
	base := make([]int, len(streams))
	for i, s := range streams {
		base[i], _ = s.count()
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		done := true
		for i, s := range streams {
			got, err := s.count()
			if err != nil {
				t.Fatalf("connection to %s failed after %d echoes: %v", s.conn.Hello.Name, got, err)
			}
			done = done && got >= base[i]+n
		}
		if done {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("streams did not answer %d more echoes within 10s", n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
