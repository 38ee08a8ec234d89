package health

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strconv"
	"strings"
)

// httpChecker sends one HTTP/1.1 request per round and judges the response.
// It keeps its connection for up to reuse rounds (see the package
// documentation for why) and speaks HTTP over it directly instead of using
// http.Client: a Transport runs two goroutines per connection, pools idle
// connections by its own rules, follows redirects and reads unbounded
// headers unless each of those is switched off.
type httpChecker struct {
	dial    Dialer
	addr    string
	req     []byte        // the whole request, built once
	method  *http.Request // tells http.ReadResponse whether a body follows
	tls     *tls.Config   // nil for plain http
	status  [2]int
	body    []byte
	weights bool
	reuse   int // rounds one connection serves; 1: a new one every round

	// The kept connection, owned by the goroutine running Check.
	conn  net.Conn
	limit *capReader // under br: caps what one response may take
	br    *bufio.Reader
	uses  int // requests sent on conn
}

func newHTTPChecker(dial Dialer, dst netip.AddrPort, c *Check, reuse int) (*httpChecker, error) {
	method, path, host := c.Method, c.Path, c.Host
	if method == "" {
		method = http.MethodGet
	}
	if path == "" {
		path = "/"
	}
	https := c.Type == "https"
	if host == "" {
		host = hostHeader(dst, https)
	}
	switch {
	case !validToken(method):
		return nil, fmt.Errorf("bad method %q", method)
	case !strings.HasPrefix(path, "/") || !printable(path):
		return nil, fmt.Errorf("bad path %q", path)
	case !printable(host):
		return nil, fmt.Errorf("bad host %q", host)
	}
	// Only idempotent requests are sent on a kept connection, because a
	// request on a connection the backend has just closed is sent again.
	if method != http.MethodGet && method != http.MethodHead {
		reuse = 1
	}
	connection := ""
	if reuse <= 1 {
		reuse = 1
		connection = "Connection: close\r\n"
	}
	h := &httpChecker{
		dial:    dial,
		addr:    dst.String(),
		req:     fmt.Appendf(nil, "%s %s HTTP/1.1\r\nHost: %s\r\nUser-Agent: lvsd-health\r\nAccept: */*\r\n%s\r\n", method, path, host, connection),
		method:  &http.Request{Method: method},
		status:  c.ExpectStatus,
		body:    []byte(c.ExpectBody),
		weights: c.WeightHeader,
		reuse:   reuse,
	}
	if h.status == [2]int{} {
		h.status = [2]int{200, 399}
	}
	if https {
		// The name verified (and sent as SNI) is TLSServerName, else Host
		// without a port; for an IP, Go sends no SNI and verifies the
		// certificate's IP SANs.
		name := host
		if hn, _, err := net.SplitHostPort(host); err == nil {
			name = hn
		}
		if c.TLSServerName != "" {
			name = c.TLSServerName
		}
		var roots *x509.CertPool
		if len(c.TLSRootCAs) > 0 {
			roots = x509.NewCertPool()
			if !roots.AppendCertsFromPEM(c.TLSRootCAs) {
				return nil, errors.New("no PEM certificate among the trusted roots")
			}
		}
		h.tls = &tls.Config{
			ServerName:         strings.Trim(name, "[]"),
			RootCAs:            roots,
			InsecureSkipVerify: c.InsecureTLS,
			MinVersion:         tls.VersionTLS12,
			// Resuming the session on the next connection spares both
			// sides the certificate signature and its checks; one entry
			// per check is all it needs.
			ClientSessionCache: tls.NewLRUClientSessionCache(1),
		}
	}
	return h, nil
}

// hostHeader is the target's address as a browser would send it: the port
// only when it is not the scheme's default.
func hostHeader(dst netip.AddrPort, https bool) string {
	def := uint16(80)
	if https {
		def = 443
	}
	if dst.Port() == def {
		if dst.Addr().Is6() {
			return "[" + dst.Addr().String() + "]"
		}
		return dst.Addr().String()
	}
	return dst.String()
}

func (h *httpChecker) Check(ctx context.Context) Result {
	if h.conn != nil {
		res, stale := h.exchange(ctx, true)
		if !stale {
			return res
		}
		// The backend had closed the kept connection (its idle timeout,
		// a restart): ask again on a fresh one, as http.Transport does.
	}
	if res, ok := h.connect(ctx); !ok {
		return res
	}
	res, _ := h.exchange(ctx, false)
	return res
}

// connect dials (and for https, handshakes) a new connection.
func (h *httpChecker) connect(ctx context.Context) (Result, bool) {
	conn, err := h.dial.DialContext(ctx, "tcp", h.addr)
	if err != nil {
		return dialFailed(ctx, "connect", err), false
	}
	if h.tls != nil {
		tc := tls.Client(conn, h.tls)
		if err := tc.HandshakeContext(ctx); err != nil {
			conn.Close()
			return failed(describe(ctx, "tls", err)), false
		}
		conn = tc
	}
	h.conn, h.uses = conn, 0
	h.limit = &capReader{r: conn}
	h.br = bufio.NewReaderSize(h.limit, 4096)
	return Result{}, true
}

// Close closes the kept connection, if any. The target's goroutine calls
// it when the target stops.
func (h *httpChecker) Close() error {
	if h.conn != nil {
		h.conn.Close()
		h.conn, h.br, h.limit = nil, nil, nil
	}
	return nil
}

// exchange sends the request on h.conn and judges the response. The
// connection is kept for the next round only after a complete, well-formed
// response that did not ask to close. stale reports that a reused
// connection failed before any response arrived, so a retry is worth it.
func (h *httpChecker) exchange(ctx context.Context, reused bool) (res Result, stale bool) {
	keep := false
	defer func() {
		if !keep {
			h.Close()
		}
	}()
	stop := setDeadline(ctx, h.conn)
	defer stop()
	h.uses++
	if _, err := h.conn.Write(h.req); err != nil {
		return failed(describe(ctx, "send", err)), reused && ctx.Err() == nil
	}
	// The cap applies to the status line and headers first, then to the
	// body.
	h.limit.n = maxHeaderBytes
	resp, err := http.ReadResponse(h.br, h.method)
	if err != nil {
		if errors.Is(err, errTooLarge) {
			return failed("response headers larger than 64 KiB"), false
		}
		// Closed (EOF or reset) before a single byte of response: the
		// backend had closed the kept connection. http.Transport retries
		// on the same condition.
		nothing := h.limit.n == maxHeaderBytes
		stale = reused && nothing && ctx.Err() == nil && !errors.Is(err, os.ErrDeadlineExceeded)
		return failed(describe(ctx, "response", err)), stale
	}
	code := resp.StatusCode
	if code < h.status[0] || code > h.status[1] {
		res.Reason = fmt.Sprintf("status %d, want %d-%d", code, h.status[0], h.status[1])
	} else if h.weights {
		res.HasWeight = true
		res.Weight, res.BadWeight = parseWeight(resp.Header.Values(WeightHeader))
	}
	// The body is read whatever the status: to search it, to reuse the
	// connection, and so that a backend closing after its response
	// closes first (the TIME_WAIT socket then stays on its side).
	h.limit.n += maxBodyBytes
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxBodyBytes))
	if res.Reason != "" {
		return res, false
	}
	if err != nil && !errors.Is(err, errTooLarge) {
		res.Reason = describe(ctx, "body", err)
		return res, false
	}
	if len(h.body) > 0 && !bytes.Contains(body, h.body) {
		res.Reason = "body does not contain " + strconv.Quote(string(h.body))
		return res, false
	}
	res.OK = true
	// Keep the connection only if the response ended where it said it
	// would, nothing else is pending, and it has not served its rounds.
	var one [1]byte
	n, err := resp.Body.Read(one[:])
	keep = h.uses < h.reuse && !resp.Close && n == 0 && err == io.EOF && h.br.Buffered() == 0
	return res, false
}

var errTooLarge = errors.New("response too large")

// capReader reads at most n more bytes from r, then fails with errTooLarge.
type capReader struct {
	r io.Reader
	n int64
}

func (c *capReader) Read(p []byte) (int, error) {
	if c.n <= 0 {
		return 0, errTooLarge
	}
	if int64(len(p)) > c.n {
		p = p[:c.n]
	}
	n, err := c.r.Read(p)
	c.n -= int64(n)
	return n, err
}

// validToken reports whether s is an HTTP token (a method name).
func validToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		b := s[i]
		if b <= ' ' || b >= 0x7f || strings.IndexByte(`"(),/:;<=>?@[\]{}`, b) >= 0 {
			return false
		}
	}
	return true
}

// printable reports whether s is non-empty visible ASCII, so that it cannot
// break the request line or inject a header.
func printable(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] <= ' ' || s[i] >= 0x7f {
			return false
		}
	}
	return true
}
