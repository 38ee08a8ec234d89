package health

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync"
)

// httpChecker sends one HTTP/1.1 request over a fresh connection and judges
// the response. It speaks HTTP over the connection itself instead of using
// http.Client: a Transport would keep idle connections (one file
// descriptor per backend) and run two goroutines per connection, and its
// redirect and size policies would have to be switched off one by one.
type httpChecker struct {
	dial    Dialer
	addr    string
	req     []byte        // the whole request, built once
	method  *http.Request // tells http.ReadResponse whether a body follows
	tls     *tls.Config   // nil for plain http
	status  [2]int
	body    []byte
	weights bool
}

func newHTTPChecker(dial Dialer, dst netip.AddrPort, c *Check) (*httpChecker, error) {
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
	h := &httpChecker{
		dial:    dial,
		addr:    dst.String(),
		req:     fmt.Appendf(nil, "%s %s HTTP/1.1\r\nHost: %s\r\nUser-Agent: lvsd-health\r\nAccept: */*\r\nConnection: close\r\n\r\n", method, path, host),
		method:  &http.Request{Method: method},
		status:  c.ExpectStatus,
		body:    []byte(c.ExpectBody),
		weights: c.WeightHeader,
	}
	if h.status == [2]int{} {
		h.status = [2]int{200, 399}
	}
	if https {
		// The name verified (and sent as SNI) is Host without a port; for
		// an IP, Go sends no SNI and verifies the certificate's IP SANs.
		name := host
		if hn, _, err := net.SplitHostPort(host); err == nil {
			name = hn
		}
		h.tls = &tls.Config{
			ServerName:         strings.Trim(name, "[]"),
			InsecureSkipVerify: c.InsecureTLS,
			MinVersion:         tls.VersionTLS12,
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

// readers recycles the 4 KiB read buffers: 1,000 targets a second would
// otherwise allocate 4 MB/s for the garbage collector.
var readers = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, 4096) }}

func (h *httpChecker) Check(ctx context.Context) Result {
	conn, err := h.dial.DialContext(ctx, "tcp", h.addr)
	if err != nil {
		return failed(describe(ctx, "connect", err))
	}
	defer conn.Close()
	stop := setDeadline(ctx, conn)
	defer stop()
	if h.tls != nil {
		tc := tls.Client(conn, h.tls)
		if err := tc.HandshakeContext(ctx); err != nil {
			return failed(describe(ctx, "tls", err))
		}
		conn = tc
	}
	if _, err := conn.Write(h.req); err != nil {
		return failed(describe(ctx, "send", err))
	}

	// limit caps the status line and headers first, then the body.
	limit := &capReader{r: conn, n: maxHeaderBytes}
	br := readers.Get().(*bufio.Reader)
	br.Reset(limit)
	defer func() { br.Reset(nil); readers.Put(br) }()
	resp, err := http.ReadResponse(br, h.method)
	if err != nil {
		if errors.Is(err, errTooLarge) {
			return failed("response headers larger than 64 KiB")
		}
		return failed(describe(ctx, "response", err))
	}
	var res Result
	code := resp.StatusCode
	if code < h.status[0] || code > h.status[1] {
		res.Reason = fmt.Sprintf("status %d, want %d-%d", code, h.status[0], h.status[1])
		return res
	}
	if h.weights {
		res.HasWeight = true
		res.Weight, res.BadWeight = parseWeight(resp.Header.Values(WeightHeader))
	}
	// The body is read even when not searched, so that the backend, which
	// closes after its response, closes first: the TIME_WAIT socket then
	// stays on the backend rather than the director, and the backend sees
	// no reset for unread data. A body that does not arrive within the
	// timeout fails the check either way.
	limit.n += maxBodyBytes
	var body []byte
	if len(h.body) > 0 {
		body, err = io.ReadAll(io.LimitReader(resp.Body, maxBodyBytes))
	} else {
		_, err = io.Copy(io.Discard, io.LimitReader(resp.Body, maxBodyBytes))
	}
	if err != nil && !errors.Is(err, errTooLarge) {
		res.Reason = describe(ctx, "body", err)
		return res
	}
	if len(h.body) > 0 && !bytes.Contains(body, h.body) {
		res.Reason = "body does not contain " + strconv.Quote(string(h.body))
		return res
	}
	res.OK = true
	return res
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
