//go:build e2e

package e2e

import (
	"context"
	"errors"
	"io"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lvsd/lvsd/e2e/topo"
)

// Load for the data-plane measurements (TestDataPlaneCost): new
// connections as fast as a few workers can open them, and bulk streams in
// either direction. Client, directors and real servers are namespaces of
// one VM, so every figure is the whole VM's work; only the ratios between
// forwarding setups measured in the same run mean anything.

// connRate is what openConnections measured.
type connRate struct {
	conns, failed int
	elapsed       time.Duration
	busy          uint64 // the VM's busy CPU time in the window, jiffies (USER_HZ)
}

func (r connRate) perSecond() float64 { return float64(r.conns) / r.elapsed.Seconds() }

// cpuPerConn is the VM's busy CPU time per connection, in microseconds.
func (r connRate) cpuPerConn() float64 {
	if r.conns == 0 {
		return 0
	}
	return float64(r.busy) * 1e6 / userHZ / float64(r.conns)
}

const userHZ = 100

// openConnections opens connections to dst for window, each worker one at a
// time: connect from the next source address, read the server's greeting
// line, close. Each worker stays on one OS thread in the client's
// namespace, so no connection pays a namespace switch.
func openConnections(t *testing.T, client *topo.Host, srcs []netip.Addr, dst netip.AddrPort, workers int, window time.Duration) connRate {
	t.Helper()
	var conns, failed atomic.Int64
	var firstErr atomic.Value
	busy0, _ := cpuTimes(t)
	start := time.Now()
	end := start.Add(window)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = client.Do(func() error {
				buf := make([]byte, 512)
				for n := w; time.Now().Before(end); n += workers {
					if err := greeted(srcs[n%len(srcs)], dst, buf); err != nil {
						failed.Add(1)
						firstErr.CompareAndSwap(nil, err)
						continue
					}
					conns.Add(1)
				}
				return nil
			})
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	busy1, _ := cpuTimes(t)
	if err, ok := firstErr.Load().(error); ok {
		t.Logf("%s: %d of %d connections failed, the first: %v", dst, failed.Load(), failed.Load()+conns.Load(), err)
	}
	return connRate{conns: int(conns.Load()), failed: int(failed.Load()), elapsed: elapsed, busy: busy1 - busy0}
}

// greeted connects from src to dst on the calling thread, reads one line
// and closes.
func greeted(src netip.Addr, dst netip.AddrPort, buf []byte) error {
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: src.AsSlice()}, Timeout: 3 * time.Second}
	c, err := d.Dial("tcp4", dst.String())
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(3 * time.Second))
	for got := 0; ; {
		n, err := c.Read(buf[got:])
		got += n
		for _, b := range buf[got-n : got] {
			if b == '\n' {
				return nil
			}
		}
		if err != nil {
			return err
		}
		if got == len(buf) {
			return errors.New("greeting longer than a line")
		}
	}
}

// bulkServer accepts streams on each real server: the client's first byte
// says the direction, 'u' (the client sends, the server counts what it
// reads) or 'd' (the server sends until the client closes).
type bulkServer struct {
	port     uint16
	received atomic.Int64
	mu       sync.Mutex
	hosts    []*topo.Host
	ls       []net.Listener
	conns    map[net.Conn]bool
}

func serveBulk(t *testing.T, port uint16, hosts ...*topo.Host) *bulkServer {
	t.Helper()
	s := &bulkServer{port: port, hosts: hosts, conns: map[net.Conn]bool{}}
	if err := s.start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.stop)
	return s
}

// restart closes the listeners and connections and listens again (a
// listener opened before the real server's TOA programs would not keep
// its SYNs).
func (s *bulkServer) restart(t *testing.T) {
	t.Helper()
	s.stop()
	if err := s.start(); err != nil {
		t.Fatal(err)
	}
}

func (s *bulkServer) start() error {
	for _, h := range s.hosts {
		l, err := h.Listen("tcp", netip.AddrPortFrom(netip.IPv6Unspecified(), s.port).String())
		if err != nil {
			return err
		}
		s.mu.Lock()
		s.ls = append(s.ls, l)
		s.mu.Unlock()
		go s.accept(l)
	}
	return nil
}

func (s *bulkServer) accept(l net.Listener) {
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		s.mu.Lock()
		s.conns[c] = true
		s.mu.Unlock()
		go s.serve(c)
	}
}

func (s *bulkServer) serve(c net.Conn) {
	defer func() {
		c.Close()
		s.mu.Lock()
		delete(s.conns, c)
		s.mu.Unlock()
	}()
	buf := make([]byte, 64<<10)
	if _, err := io.ReadFull(c, buf[:1]); err != nil {
		return
	}
	switch buf[0] {
	case 'u':
		for {
			n, err := c.Read(buf)
			s.received.Add(int64(n))
			if err != nil {
				return
			}
		}
	case 'd':
		for {
			if _, err := c.Write(buf); err != nil {
				return
			}
		}
	}
}

func (s *bulkServer) stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, l := range s.ls {
		l.Close()
	}
	for c := range s.conns {
		c.Close()
	}
	s.ls = nil
}

// streamRate runs one stream per source to dst in direction dir ('u' or
// 'd') and returns the bytes per second the receivers got in window, after
// a second for the streams to reach their pace.
func streamRate(t *testing.T, client *topo.Host, srcs []netip.Addr, dst netip.AddrPort, dir byte, srv *bulkServer, window time.Duration) float64 {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var downloaded atomic.Int64
	var wg sync.WaitGroup
	var conns []net.Conn
	for _, src := range srcs {
		c, err := client.Dial(ctx, "tcp4", src, dst)
		if err != nil {
			t.Fatalf("stream from %s to %s: %v", src, dst, err)
		}
		conns = append(conns, c)
		if _, err := c.Write([]byte{dir}); err != nil {
			t.Fatalf("stream from %s to %s: %v", src, dst, err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, 64<<10)
			for ctx.Err() == nil {
				if dir == 'u' {
					if _, err := c.Write(buf); err != nil {
						return
					}
					continue
				}
				n, err := c.Read(buf)
				downloaded.Add(int64(n))
				if err != nil {
					return
				}
			}
		}()
	}
	counted := func() int64 {
		if dir == 'u' {
			return srv.received.Load()
		}
		return downloaded.Load()
	}
	time.Sleep(time.Second)
	from, start := counted(), time.Now()
	time.Sleep(window)
	got, elapsed := counted()-from, time.Since(start)
	cancel()
	for _, c := range conns {
		c.Close()
	}
	wg.Wait()
	if got == 0 {
		t.Errorf("no bytes from %v to %s (%c) in %v", srcs, dst, dir, window)
	}
	return float64(got) / elapsed.Seconds()
}
