package health

import (
	"context"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// probe runs check c once against addr ("ip:port") with the built-in
// checkers and a 500 ms timeout unless c sets one.
func probe(t *testing.T, addr string, c Check, opts ...Option) (Result, time.Duration) {
	t.Helper()
	ap := netip.MustParseAddrPort(addr)
	if c.Timeout == 0 {
		c.Timeout = 500 * time.Millisecond
	}
	c.Interval = c.Timeout
	tg := Target{Key: "t/" + addr, Addr: ap.Addr(), Port: ap.Port(), Checks: []Check{c}}
	m := NewMonitor(nil, opts...)
	t.Cleanup(m.icmp.close)
	ch := m.newChecker(&tg, &tg.Checks[0])
	ctx, cancel := context.WithTimeout(context.Background(), c.Timeout)
	defer cancel()
	start := time.Now()
	res := ch.Check(ctx)
	return res, time.Since(start)
}

// loopbacks are the addresses the socket tests listen on; ::1 is skipped
// where IPv6 is off.
func loopbacks(t *testing.T) []string {
	out := []string{"127.0.0.1"}
	if l, err := net.Listen("tcp", "[::1]:0"); err == nil {
		l.Close()
		out = append(out, "::1")
	} else {
		t.Logf("no IPv6 loopback: %v", err)
	}
	return out
}

func hostPort(ip string, port int) string { return net.JoinHostPort(ip, fmt.Sprint(port)) }

func wantResult(t *testing.T, res Result, ok bool, reason string) {
	t.Helper()
	if res.OK != ok || !strings.Contains(res.Reason, reason) {
		t.Errorf("got OK=%v %q, want OK=%v with %q", res.OK, res.Reason, ok, reason)
	}
}

// silentTCP accepts connections and never answers.
func silentTCP(t *testing.T, ip string) string {
	l, err := net.Listen("tcp", hostPort(ip, 0))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		var held []net.Conn
		defer func() {
			for _, c := range held {
				c.Close()
			}
		}()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			held = append(held, c)
		}
	}()
	return l.Addr().String()
}

// closedPort returns an address on which nothing listens.
func closedPort(t *testing.T, network, ip string) string {
	var addr string
	if strings.HasPrefix(network, "udp") {
		c, err := net.ListenPacket(network, hostPort(ip, 0))
		if err != nil {
			t.Fatal(err)
		}
		addr = c.LocalAddr().String()
		c.Close()
	} else {
		l, err := net.Listen(network, hostPort(ip, 0))
		if err != nil {
			t.Fatal(err)
		}
		addr = l.Addr().String()
		l.Close()
	}
	return addr
}

func TestTCP(t *testing.T) {
	for _, ip := range loopbacks(t) {
		t.Run(ip, func(t *testing.T) {
			l, err := net.Listen("tcp", hostPort(ip, 0))
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			res, _ := probe(t, l.Addr().String(), Check{Type: "tcp"})
			wantResult(t, res, true, "")
			res, _ = probe(t, closedPort(t, "tcp", ip), Check{Type: "tcp"})
			wantResult(t, res, false, "connect: connection refused")
		})
	}
}

// blackhole is a Dialer whose connections never complete, like a SYN to a
// backend whose packets are dropped.
type blackhole struct{}

func (blackhole) DialContext(ctx context.Context, _, _ string) (net.Conn, error) {
	<-ctx.Done()
	return nil, &net.OpError{Op: "dial", Net: "tcp", Err: ctx.Err()}
}

func TestTCPTimeout(t *testing.T) {
	// "timed out": the check's own deadline ended it (the blackhole never
	// returns by itself).
	res, _ := probe(t, "192.0.2.1:80", Check{Type: "tcp", Timeout: 100 * time.Millisecond}, WithDialer(blackhole{}))
	wantResult(t, res, false, "connect: timed out")
}

func TestUDP(t *testing.T) {
	for _, ip := range loopbacks(t) {
		t.Run(ip, func(t *testing.T) {
			pc, err := net.ListenPacket("udp", hostPort(ip, 0))
			if err != nil {
				t.Fatal(err)
			}
			defer pc.Close()
			go func() { // answers "pong <request>" except to "quiet"
				buf := make([]byte, 2048)
				for {
					n, from, err := pc.ReadFrom(buf)
					if err != nil {
						return
					}
					if string(buf[:n]) != "quiet" {
						pc.WriteTo(append([]byte("pong "), buf[:n]...), from)
					}
				}
			}()
			addr := pc.LocalAddr().String()
			tests := []struct {
				name   string
				c      Check
				addr   string
				ok     bool
				reason string
			}{
				{"expected reply", Check{Type: "udp", Send: []byte("ping"), ExpectData: []byte("pong ping")}, addr, true, ""},
				{"any reply", Check{Type: "udp", Send: []byte("ping")}, addr, true, ""},
				{"wrong reply", Check{Type: "udp", Send: []byte("ping"), ExpectData: []byte("PONG")}, addr, false, `reply does not contain "PONG"`},
				{"no reply", Check{Type: "udp", Send: []byte("quiet"), Timeout: 100 * time.Millisecond}, addr, false, "reply: timed out"},
				{"port unreachable", Check{Type: "udp", Send: []byte("ping")}, closedPort(t, "udp", ip), false, "connection refused"},
			}
			for _, tt := range tests {
				res, _ := probe(t, tt.addr, tt.c)
				if res.OK != tt.ok || !strings.Contains(res.Reason, tt.reason) {
					t.Errorf("%s: got %v %q, want %v %q", tt.name, res.OK, res.Reason, tt.ok, tt.reason)
				}
			}
		})
	}
}

// newHTTP starts an httptest server with h on ip.
func newHTTP(t *testing.T, ip string, tls bool, h http.Handler) *httptest.Server {
	l, err := net.Listen("tcp", hostPort(ip, 0))
	if err != nil {
		t.Fatal(err)
	}
	s := httptest.NewUnstartedServer(h)
	s.Config.ErrorLog = log.New(io.Discard, "", 0) // the TLS tests fail handshakes on purpose
	s.Listener.Close()
	s.Listener = l
	if tls {
		s.StartTLS()
	} else {
		s.Start()
	}
	t.Cleanup(s.Close)
	return s
}

func TestHTTP(t *testing.T) {
	var lastHost, lastMethod, lastConn atomic.Value
	var redirected atomic.Int32
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		lastHost.Store(r.Host)
		lastMethod.Store(r.Method)
		lastConn.Store(r.Header.Get("Connection"))
		switch r.URL.Path {
		case "/ok":
			w.Header().Set(WeightHeader, " 7 ")
			fmt.Fprint(w, "all good")
		case "/sick":
			w.Header().Set(WeightHeader, "9")
			http.Error(w, "sick", http.StatusServiceUnavailable)
		case "/badweight":
			w.Header().Set(WeightHeader, "1001")
		case "/noweight":
		case "/redirect":
			http.Redirect(w, r, "/elsewhere", http.StatusFound)
		case "/elsewhere":
			redirected.Add(1)
		case "/big":
			w.Write([]byte(strings.Repeat("x", 100<<10) + "needle"))
		case "/slowbody":
			w.Header().Set("Content-Length", "100")
			w.WriteHeader(200)
			w.(http.Flusher).Flush()
			<-r.Context().Done()
		default:
			http.NotFound(w, r)
		}
	})
	for _, ip := range loopbacks(t) {
		t.Run(ip, func(t *testing.T) {
			s := newHTTP(t, ip, false, h)
			addr := s.Listener.Addr().String()
			tests := []struct {
				name   string
				c      Check
				ok     bool
				reason string
				weight int // -2: HasWeight false
				bad    string
			}{
				{"ok with weight", Check{Path: "/ok", WeightHeader: true}, true, "", 7, ""},
				{"ok, weight not asked for", Check{Path: "/ok"}, true, "", -2, ""},
				{"status out of range, weight not taken", Check{Path: "/sick", WeightHeader: true}, false, "status 503, want 200-399", -2, ""},
				{"status in a custom range", Check{Path: "/sick", ExpectStatus: [2]int{500, 503}, WeightHeader: true}, true, "", 9, ""},
				{"404", Check{Path: "/nope"}, false, "status 404", -2, ""},
				{"invalid weight", Check{Path: "/badweight", WeightHeader: true}, true, "", 0, "1001"},
				{"no weight header", Check{Path: "/noweight", WeightHeader: true}, true, "", NoWeight, ""},
				{"body substring", Check{Path: "/ok", ExpectBody: "good"}, true, "", -2, ""},
				{"body mismatch", Check{Path: "/ok", ExpectBody: "bad"}, false, `body does not contain "bad"`, -2, ""},
				{"body beyond 64 KiB is not searched", Check{Path: "/big", ExpectBody: "needle"}, false, "body does not contain", -2, ""},
				{"redirect not followed, 302 in default range", Check{Path: "/redirect"}, true, "", -2, ""},
				{"redirect fails a 200-only range", Check{Path: "/redirect", ExpectStatus: [2]int{200, 200}}, false, "status 302, want 200-200", -2, ""},
				{"HEAD", Check{Method: "HEAD", Path: "/ok"}, true, "", -2, ""},
				{"stalled body", Check{Path: "/slowbody", Timeout: 200 * time.Millisecond}, false, "body: timed out", -2, ""},
				{"bad path rejected", Check{Path: "/a b"}, false, "invalid check: bad path", -2, ""},
			}
			for _, tt := range tests {
				tt.c.Type = "http"
				res, _ := probe(t, addr, tt.c)
				if res.OK != tt.ok || !strings.Contains(res.Reason, tt.reason) {
					t.Errorf("%s: got %v %q, want %v %q", tt.name, res.OK, res.Reason, tt.ok, tt.reason)
				}
				if tt.weight == -2 && res.HasWeight || tt.weight != -2 && (!res.HasWeight || res.Weight != tt.weight && tt.bad == "" || res.BadWeight != tt.bad) {
					t.Errorf("%s: weight %+v, want %d bad %q", tt.name, res, tt.weight, tt.bad)
				}
			}
			if redirected.Load() != 0 {
				t.Error("a redirect was followed")
			}
			probe(t, addr, Check{Type: "http", Path: "/ok"}, WithReuse(1))
			if got := lastConn.Load(); got != "close" {
				t.Errorf("Connection header %q without reuse, want close", got)
			}
			probe(t, addr, Check{Type: "http", Path: "/ok"})
			if want := netip.MustParseAddrPort(addr).String(); lastHost.Load() != want {
				t.Errorf("Host %q, want %q", lastHost.Load(), want)
			}
			probe(t, addr, Check{Type: "http", Path: "/ok", Host: "www.example.com", Method: "POST"})
			if lastHost.Load() != "www.example.com" || lastMethod.Load() != "POST" || lastConn.Load() != "close" {
				t.Errorf("Host %q method %q Connection %q: want a POST never kept alive",
					lastHost.Load(), lastMethod.Load(), lastConn.Load())
			}
		})
	}
}

func TestHTTPTimeoutAndRefused(t *testing.T) {
	for _, ip := range loopbacks(t) {
		res, _ := probe(t, silentTCP(t, ip), Check{Type: "http", Timeout: 150 * time.Millisecond})
		wantResult(t, res, false, "response: timed out")
		res, _ = probe(t, closedPort(t, "tcp", ip), Check{Type: "http"})
		wantResult(t, res, false, "connect: connection refused")
	}
}

// rawHTTP serves one fixed response to every connection.
func rawHTTP(t *testing.T, response string) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				c.SetDeadline(time.Now().Add(2 * time.Second))
				c.Read(make([]byte, 4096))
				c.Write([]byte(response))
			}()
		}
	}()
	return l.Addr().String()
}

func TestHTTPUntrustedResponses(t *testing.T) {
	tests := []struct {
		name     string
		response string
		ok       bool
		reason   string
	}{
		{"huge header", "HTTP/1.1 200 OK\r\nX-Big: " + strings.Repeat("a", 100<<10) + "\r\n\r\n", false, "response headers larger than 64 KiB"},
		{"garbage", "SSH-2.0-OpenSSH_9.6\r\n", false, "response: "},
		{"empty", "", false, "response: "},
		{"two weight headers that differ", "HTTP/1.1 200 OK\r\n" + WeightHeader + ": 1\r\n" + WeightHeader + ": 900\r\nContent-Length: 0\r\n\r\n", true, ""},
		{"chunked body", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n", true, ""},
	}
	for _, tt := range tests {
		res, _ := probe(t, rawHTTP(t, tt.response), Check{Type: "http", WeightHeader: true, ExpectBody: map[bool]string{true: "hello"}[tt.name == "chunked body"]})
		if res.OK != tt.ok || !strings.Contains(res.Reason, tt.reason) {
			t.Errorf("%s: got %v %q, want %v %q", tt.name, res.OK, res.Reason, tt.ok, tt.reason)
		}
		if tt.name == "two weight headers that differ" && res.BadWeight == "" {
			t.Errorf("%s: weight %d accepted", tt.name, res.Weight)
		}
	}
}

func TestHTTPS(t *testing.T) {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set(WeightHeader, "3")
	})
	for _, ip := range loopbacks(t) {
		t.Run(ip, func(t *testing.T) {
			s := newHTTP(t, ip, true, h)
			addr := s.Listener.Addr().String()
			res, _ := probe(t, addr, Check{Type: "https", InsecureTLS: true, WeightHeader: true})
			wantResult(t, res, true, "")
			if res.Weight != 3 {
				t.Errorf("weight %d over https", res.Weight)
			}
			// httptest's certificate is self-signed: verification fails.
			res, _ = probe(t, addr, Check{Type: "https"})
			wantResult(t, res, false, "tls: ")
			// Trusting the server's certificate as a root verifies it, for
			// its IP and for a name it holds (httptest's: example.com),
			// not for another name.
			roots := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: s.Certificate().Raw})
			res, _ = probe(t, addr, Check{Type: "https", TLSRootCAs: roots})
			wantResult(t, res, true, "")
			res, _ = probe(t, addr, Check{Type: "https", TLSRootCAs: roots, TLSServerName: "example.com"})
			wantResult(t, res, true, "")
			res, _ = probe(t, addr, Check{Type: "https", TLSRootCAs: roots, TLSServerName: "other.example"})
			wantResult(t, res, false, "certificate is valid for")
			// Plain HTTP to a TLS port fails with a 400, not a hang.
			res, _ = probe(t, addr, Check{Type: "http"})
			wantResult(t, res, false, "status 400")
		})
	}
	// TLS handshake against a server that never answers times out.
	res, _ := probe(t, silentTCP(t, "127.0.0.1"), Check{Type: "https", InsecureTLS: true, Timeout: 100 * time.Millisecond})
	wantResult(t, res, false, "tls: timed out")
}

func TestHostHeader(t *testing.T) {
	tests := []struct {
		dst   string
		https bool
		want  string
	}{
		{"10.0.0.1:80", false, "10.0.0.1"},
		{"10.0.0.1:8080", false, "10.0.0.1:8080"},
		{"10.0.0.1:443", true, "10.0.0.1"},
		{"10.0.0.1:80", true, "10.0.0.1:80"},
		{"[2001:db8::1]:80", false, "[2001:db8::1]"},
		{"[2001:db8::1]:8443", true, "[2001:db8::1]:8443"},
	}
	for _, tt := range tests {
		if got := hostHeader(netip.MustParseAddrPort(tt.dst), tt.https); got != tt.want {
			t.Errorf("%s https=%v: %q, want %q", tt.dst, tt.https, got, tt.want)
		}
	}
}

func TestDescribe(t *testing.T) {
	ctx := context.Background()
	err := &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("no route to host")}
	if got := describe(ctx, "connect", err); got != "connect: no route to host" {
		t.Errorf("got %q", got)
	}
}
