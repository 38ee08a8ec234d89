package echo

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"time"

	"github.com/lvsd/lvsd/e2e/topo"
)

// DefaultTimeout bounds Ask and Connect when ctx has no deadline.
const DefaultTimeout = 3 * time.Second

// Ask makes one request with proto TCP, UDP or HTTP from host (nil: the
// current namespace), from source address src (zero: any), to dst, and
// returns the parsed answer.
func Ask(ctx context.Context, host *topo.Host, src netip.Addr, dst netip.AddrPort, proto string) (Reply, error) {
	ctx, cancel := withDefaultTimeout(ctx)
	defer cancel()
	var line string
	var err error
	switch proto {
	case TCP, UDP:
		line, err = askConn(ctx, host, src, dst, proto)
	case HTTP:
		line, err = askHTTP(ctx, host, src, dst)
	default:
		err = fmt.Errorf("unknown protocol %q", proto)
	}
	if err != nil {
		return Reply{}, fmt.Errorf("echo: %s %s -> %s: %w", proto, src, dst, err)
	}
	return Parse(line)
}

func withDefaultTimeout(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, DefaultTimeout)
}

func askConn(ctx context.Context, host *topo.Host, src netip.Addr, dst netip.AddrPort, proto string) (string, error) {
	c, err := host.Dial(ctx, proto, src, dst)
	if err != nil {
		return "", err
	}
	defer c.Close()
	dl, _ := ctx.Deadline()
	c.SetDeadline(dl)
	if proto == UDP {
		if _, err := io.WriteString(c, "ask\n"); err != nil {
			return "", err
		}
		buf := make([]byte, 2048)
		n, err := c.Read(buf)
		return string(buf[:n]), err
	}
	return bufio.NewReader(c).ReadString('\n')
}

func askHTTP(ctx context.Context, host *topo.Host, src netip.Addr, dst netip.AddrPort) (string, error) {
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return host.Dial(ctx, "tcp", src, dst)
		},
		DisableKeepAlives: true, // one request, one connection: counts stay exact
	}
	defer tr.CloseIdleConnections()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+dst.String()+"/", nil)
	if err != nil {
		return "", err
	}
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("HTTP %s: %q", resp.Status, body)
	}
	return string(body), err
}

// Conn is a long-lived plain TCP connection to an echo server.
type Conn struct {
	net.Conn
	// Hello is the greeting the server sent on connect.
	Hello Reply
	r     *bufio.Reader
}

// Connect opens a plain TCP connection from host (nil: the current
// namespace), from src (zero: any), to dst and reads the greeting. Close it
// when done.
func Connect(ctx context.Context, host *topo.Host, src netip.Addr, dst netip.AddrPort) (*Conn, error) {
	c, r, hello, err := dialGreeted(ctx, host, src, dst)
	if err != nil {
		return nil, err
	}
	return &Conn{Conn: c, r: r, Hello: hello}, nil
}

// dialGreeted connects from host and src to dst and reads the server's
// greeting, bounded by ctx (or DefaultTimeout); it leaves no deadline set.
func dialGreeted(ctx context.Context, host *topo.Host, src netip.Addr, dst netip.AddrPort) (net.Conn, *bufio.Reader, Reply, error) {
	ctx, cancel := withDefaultTimeout(ctx)
	defer cancel()
	c, err := host.Dial(ctx, "tcp", src, dst)
	if err != nil {
		return nil, nil, Reply{}, fmt.Errorf("echo: connect %s -> %s: %w", src, dst, err)
	}
	dl, _ := ctx.Deadline()
	c.SetDeadline(dl)
	r := bufio.NewReader(c)
	line, err := r.ReadString('\n')
	var hello Reply
	if err == nil {
		hello, err = Parse(line)
	}
	if err != nil {
		c.Close()
		return nil, nil, Reply{}, fmt.Errorf("echo: greeting from %s: %w", dst, err)
	}
	c.SetDeadline(time.Time{})
	return c, r, hello, nil
}

// PeerName asks the server what getpeername() returns on this connection
// now.
func (c *Conn) PeerName(ctx context.Context) (netip.AddrPort, error) {
	ctx, cancel := withDefaultTimeout(ctx)
	defer cancel()
	dl, _ := ctx.Deadline()
	c.SetDeadline(dl)
	defer c.SetDeadline(time.Time{})
	if _, err := io.WriteString(c, PeerNameQuery+"\n"); err != nil {
		return netip.AddrPort{}, fmt.Errorf("echo: write: %w", err)
	}
	line, err := c.r.ReadString('\n')
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("echo: read: %w", err)
	}
	text, ok := strings.CutPrefix(strings.TrimSuffix(line, "\n"), c.Hello.Name+": ")
	if !ok {
		return netip.AddrPort{}, fmt.Errorf("echo: got %q from another server than %s", line, c.Hello.Name)
	}
	return netip.ParseAddrPort(text)
}

// Echo sends text (one line) and checks that the same server echoes it:
// the connection still works and still reaches the server that greeted.
func (c *Conn) Echo(ctx context.Context, text string) error {
	ctx, cancel := withDefaultTimeout(ctx)
	defer cancel()
	if strings.ContainsAny(text, "\r\n") {
		return fmt.Errorf("echo: text must be one line: %q", text)
	}
	dl, _ := ctx.Deadline()
	c.SetDeadline(dl)
	defer c.SetDeadline(time.Time{})
	if _, err := io.WriteString(c, text+"\n"); err != nil {
		return fmt.Errorf("echo: write: %w", err)
	}
	line, err := c.r.ReadString('\n')
	if err != nil {
		return fmt.Errorf("echo: read: %w", err)
	}
	if want := c.Hello.Name + ": " + text + "\n"; line != want {
		return fmt.Errorf("echo: got %q, want %q", line, want)
	}
	return nil
}
