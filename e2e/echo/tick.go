package echo

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/lvsd/lvsd/e2e/topo"
)

// TickServer speaks first: a line protocol for long-lived connections where
// the server talks unprompted. It greets like the plain TCP server (the
// Reply line), then sends "tick <n>" every interval (n = 1, 2, …) whether
// or not the client answered, and expects the client to answer every tick
// with "ack <n>", in order. A wrong or early ack ends the connection with
// an "error: …" line, so the client sees its mistake as a broken
// connection. Its methods are safe for concurrent use.
type TickServer struct {
	Name string

	ln       net.Listener
	interval time.Duration
	wg       sync.WaitGroup
	done     chan struct{} // closed by Close

	mu     sync.Mutex
	conns  map[net.Conn]struct{} // nil once closed
	served int
	bad    int // connections ended for a wrong ack
}

// ServeTicks starts a TickServer named name (no white space) inside host's
// network namespace (nil: the current one) on port (0: any, see Addr),
// ticking every interval. It stops when ctx is done or Close is called.
func ServeTicks(ctx context.Context, host *topo.Host, name string, port uint16, interval time.Duration) (*TickServer, error) {
	if name == "" || strings.ContainsAny(name, " \t\r\n=") {
		return nil, fmt.Errorf("echo: bad server name %q", name)
	}
	if interval <= 0 {
		return nil, fmt.Errorf("echo: tick interval %v", interval)
	}
	ln, err := host.Listen("tcp", fmt.Sprintf(":%d", port))
	if err != nil {
		return nil, fmt.Errorf("echo %s: tick port %d: %w", name, port, err)
	}
	s := &TickServer{Name: name, ln: ln, interval: interval, done: make(chan struct{}), conns: map[net.Conn]struct{}{}}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return // closed
			}
			if !s.track(c) {
				c.Close()
				return
			}
			s.wg.Add(1)
			go func() {
				defer s.wg.Done()
				defer s.untrack(c)
				s.serve(c)
			}()
		}
	}()
	go func() {
		select {
		case <-ctx.Done():
			s.Close()
		case <-s.done:
		}
	}()
	return s, nil
}

// Addr returns the address the server listens on (the wildcard address
// and the actual port).
func (s *TickServer) Addr() netip.AddrPort { return s.ln.Addr().(*net.TCPAddr).AddrPort() }

// Served returns how many connections the server accepted, and how many it
// ended because the client acked wrongly.
func (s *TickServer) Served() (conns, badAcks int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.served, s.bad
}

// Drop closes every open connection (the server keeps listening) and
// returns how many there were.
func (s *TickServer) Drop() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	for c := range s.conns {
		c.Close() // the connection's goroutines untrack it
	}
	return len(s.conns)
}

// Close stops accepting, drops open connections and waits for their
// goroutines. It is idempotent.
func (s *TickServer) Close() error {
	s.mu.Lock()
	conns := s.conns
	s.conns = nil
	s.mu.Unlock()
	if conns == nil {
		return nil // already closed
	}
	close(s.done)
	err := s.ln.Close()
	for c := range conns {
		c.Close()
	}
	s.wg.Wait()
	return err
}

func (s *TickServer) track(c net.Conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.conns == nil {
		return false
	}
	s.conns[c] = struct{}{}
	s.served++
	return true
}

func (s *TickServer) untrack(c net.Conn) {
	c.Close()
	s.mu.Lock()
	if s.conns != nil {
		delete(s.conns, c)
	}
	s.mu.Unlock()
}

// serve greets, then ticks on one goroutine and checks acks on another;
// the first error of either ends the connection.
func (s *TickServer) serve(c net.Conn) {
	peer := c.RemoteAddr().(*net.TCPAddr).AddrPort()
	local := c.LocalAddr().(*net.TCPAddr).AddrPort()
	greeting := Reply{Name: s.Name, Peer: unmap(peer), Local: unmap(local)}.String() + "\n"
	var wmu sync.Mutex // ticks and the error line share the writer
	write := func(line string) error {
		wmu.Lock()
		defer wmu.Unlock()
		_, err := c.Write([]byte(line))
		return err
	}
	if write(greeting) != nil {
		return
	}
	var sentMu sync.Mutex
	sent := 0
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(s.interval)
		defer t.Stop()
		for n := 1; ; n++ {
			<-t.C
			sentMu.Lock()
			sent = n
			sentMu.Unlock()
			if write("tick "+strconv.Itoa(n)+"\n") != nil {
				c.Close() // ends the reader too
				return
			}
		}
	}()
	defer func() {
		c.Close()
		<-done
	}()
	sc := bufio.NewScanner(c)
	for acked := 0; sc.Scan(); {
		n, ok := parseCounted(sc.Text(), "ack")
		sentMu.Lock()
		last := sent
		sentMu.Unlock()
		if !ok || n != acked+1 || n > last {
			s.mu.Lock()
			s.bad++
			s.mu.Unlock()
			_ = write(fmt.Sprintf("error: got %q after ack %d, %d ticks sent\n", sc.Text(), acked, last))
			return
		}
		acked = n
	}
}

// parseCounted parses "<word> <n>".
func parseCounted(line, word string) (int, bool) {
	w, num, ok := strings.Cut(strings.TrimSpace(line), " ")
	if !ok || w != word {
		return 0, false
	}
	n, err := strconv.Atoi(num)
	return n, err == nil && n > 0
}

// TickConn is the client side of a TickServer connection.
type TickConn struct {
	net.Conn
	// Hello is the greeting the server sent on connect.
	Hello Reply
	r     *bufio.Reader
	last  int
}

// ConnectTicks opens a connection from host (nil: the current namespace),
// from src (zero: any), to a TickServer at dst and reads the greeting
// (bounded by ctx, or DefaultTimeout). Deadlines are left unset: the caller
// owns them (set them from any goroutine to bound a blocked Next).
func ConnectTicks(ctx context.Context, host *topo.Host, src netip.Addr, dst netip.AddrPort) (*TickConn, error) {
	c, r, hello, err := dialGreeted(ctx, host, src, dst)
	if err != nil {
		return nil, err
	}
	return &TickConn{Conn: c, r: r, Hello: hello}, nil
}

// Next reads the next tick, checks that it is the one after the previous,
// and acks it. It returns the tick's number.
func (c *TickConn) Next() (int, error) {
	line, err := c.r.ReadString('\n')
	if err != nil {
		return 0, fmt.Errorf("echo: read tick: %w", err)
	}
	n, ok := parseCounted(line, "tick")
	if !ok || n != c.last+1 {
		return 0, fmt.Errorf("echo: got %q after tick %d", strings.TrimSpace(line), c.last)
	}
	c.last = n
	if _, err := c.Write([]byte("ack " + strconv.Itoa(n) + "\n")); err != nil {
		return 0, fmt.Errorf("echo: ack %d: %w", n, err)
	}
	return n, nil
}
