package echo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/lvsd/lvsd/e2e/topo"
)

// Protocol names used by Config, Start, Stop, Seen and Ask.
const (
	TCP  = "tcp"
	HTTP = "http"
	UDP  = "udp"
)

// Config lists the ports to serve. Each listens on the wildcard address,
// dual stack, so it also answers for VIPs held on lo (DR).
type Config struct {
	TCP  []uint16 // plain line protocol
	HTTP []uint16
	UDP  []uint16
}

// Server is a running echo server. Its methods are safe for concurrent use.
type Server struct {
	// Name is put in every answer.
	Name string

	host    *topo.Host
	healthy atomic.Bool
	done    chan struct{}

	mu     sync.Mutex
	closed bool
	ports  map[portKey]io.Closer
	seen   map[string]map[netip.Addr]int // proto → peer address → count
}

type portKey struct {
	proto string
	port  uint16
}

// Serve starts a server named name (no white space) inside host's network
// namespace (nil: the current one) on the ports of cfg. It stops when ctx
// is done or Close is called.
func Serve(ctx context.Context, host *topo.Host, name string, cfg Config) (*Server, error) {
	if name == "" || strings.ContainsAny(name, " \t\r\n=") {
		return nil, fmt.Errorf("echo: bad server name %q", name)
	}
	s := &Server{
		Name:  name,
		host:  host,
		done:  make(chan struct{}),
		ports: map[portKey]io.Closer{},
		seen:  map[string]map[netip.Addr]int{},
	}
	s.healthy.Store(true)
	for proto, ports := range map[string][]uint16{TCP: cfg.TCP, HTTP: cfg.HTTP, UDP: cfg.UDP} {
		for _, p := range ports {
			if err := s.Start(proto, p); err != nil {
				s.Close()
				return nil, err
			}
		}
	}
	go func() {
		select {
		case <-ctx.Done():
			s.Close()
		case <-s.done:
		}
	}()
	return s, nil
}

// Start (re)opens one port; proto is TCP, HTTP or UDP.
func (s *Server) Start(proto string, port uint16) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := portKey{proto, port}
	switch {
	case s.closed:
		return errors.New("echo: server closed")
	case s.ports[k] != nil:
		return fmt.Errorf("echo: %s port %d already open", proto, port)
	}
	var c io.Closer
	var err error
	switch proto {
	case TCP:
		c, err = s.startTCP(port)
	case HTTP:
		c, err = s.startHTTP(port)
	case UDP:
		c, err = s.startUDP(port)
	default:
		err = fmt.Errorf("unknown protocol %q", proto)
	}
	if err != nil {
		return fmt.Errorf("echo %s: %s port %d: %w", s.Name, proto, port, err)
	}
	s.ports[k] = c
	return nil
}

// Stop closes one port and, for TCP and HTTP, drops its open connections
// too (a dead service: new connections are refused, kept-alive health check
// connections break).
func (s *Server) Stop(proto string, port uint16) error {
	s.mu.Lock()
	c := s.ports[portKey{proto, port}]
	delete(s.ports, portKey{proto, port})
	s.mu.Unlock()
	if c == nil {
		return fmt.Errorf("echo %s: %s port %d not open", s.Name, proto, port)
	}
	return c.Close()
}

// SetHealthy makes GET /healthz answer 200 (true, the default) or 503,
// while the service itself keeps answering.
func (s *Server) SetHealthy(ok bool) { s.healthy.Store(ok) }

// Close stops every port. It is idempotent.
func (s *Server) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	close(s.done)
	ports := s.ports
	s.ports = map[portKey]io.Closer{}
	s.mu.Unlock()
	var errs []error
	for _, c := range ports {
		errs = append(errs, c.Close())
	}
	return errors.Join(errs...)
}

// Seen returns how often each peer address was seen: TCP connections, HTTP
// requests (health checks included) and UDP datagrams. proto "" sums all.
func (s *Server) Seen(proto string) map[netip.Addr]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[netip.Addr]int{}
	for p, m := range s.seen {
		if proto == "" || proto == p {
			for a, n := range m {
				out[a] += n
			}
		}
	}
	return out
}

// ResetSeen clears the counters.
func (s *Server) ResetSeen() {
	s.mu.Lock()
	s.seen = map[string]map[netip.Addr]int{}
	s.mu.Unlock()
}

func (s *Server) count(proto string, peer netip.Addr) {
	s.mu.Lock()
	m := s.seen[proto]
	if m == nil {
		m = map[netip.Addr]int{}
		s.seen[proto] = m
	}
	m[peer]++
	s.mu.Unlock()
}

func (s *Server) line(peer, local netip.AddrPort) string {
	return Reply{Name: s.Name, Peer: unmap(peer), Local: unmap(local)}.String() + "\n"
}
