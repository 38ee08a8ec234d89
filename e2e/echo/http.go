package echo

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"sync"
)

// httpPort is one HTTP port; http.Server.Close drops its connections too.
type httpPort struct {
	srv  *http.Server
	wg   sync.WaitGroup
	once sync.Once
	err  error
}

func (s *Server) startHTTP(port uint16) (*httpPort, error) {
	ln, err := s.host.Listen("tcp", fmt.Sprintf(":%d", port))
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		s.countHTTP(r)
		if !s.healthy.Load() {
			http.Error(w, "unhealthy", http.StatusServiceUnavailable)
			return
		}
		io.WriteString(w, "ok\n")
	})
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		peer := s.countHTTP(r)
		var local netip.AddrPort
		if a, ok := r.Context().Value(http.LocalAddrContextKey).(*net.TCPAddr); ok {
			local = a.AddrPort()
		}
		w.Header().Set("Content-Type", "text/plain")
		io.WriteString(w, s.line(peer, local))
	})
	p := &httpPort{srv: &http.Server{Handler: mux}}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		if err := p.srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			p.err = err
		}
	}()
	return p, nil
}

func (s *Server) countHTTP(r *http.Request) netip.AddrPort {
	peer, _ := netip.ParseAddrPort(r.RemoteAddr)
	s.count(HTTP, peer.Addr().Unmap())
	return peer
}

func (p *httpPort) Close() error {
	p.once.Do(func() {
		err := p.srv.Close()
		p.wg.Wait()
		p.err = errors.Join(err, p.err)
	})
	return p.err
}
