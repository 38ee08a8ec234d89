package health

import (
	"bytes"
	"context"
	"encoding/binary"
	"io"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

// A backend's replies are input from the network: whatever it answers, a
// check ends with a result, reads a bounded amount, and never panics.

// replyConn is a connection whose peer answers with fixed bytes and then
// closes; what the checker writes is discarded.
type replyConn struct {
	r    *bytes.Reader
	read int
}

func (c *replyConn) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.read += n
	return n, err
}
func (c *replyConn) Write(p []byte) (int, error)      { return len(p), nil }
func (c *replyConn) Close() error                     { return nil }
func (c *replyConn) LocalAddr() net.Addr              { return &net.TCPAddr{} }
func (c *replyConn) RemoteAddr() net.Addr             { return &net.TCPAddr{} }
func (c *replyConn) SetDeadline(time.Time) error      { return nil }
func (c *replyConn) SetReadDeadline(time.Time) error  { return nil }
func (c *replyConn) SetWriteDeadline(time.Time) error { return nil }

type replyDialer struct{ conns []*replyConn }

func (d *replyDialer) DialContext(context.Context, string, string) (net.Conn, error) {
	// Every dial gets the same reply: a kept connection's retry dials again.
	c := d.conns[0]
	c.r.Seek(0, io.SeekStart)
	return c, nil
}

func FuzzHTTPResponse(f *testing.F) {
	f.Add([]byte("HTTP/1.1 200 OK\r\nContent-Length: 2\r\nLvsd-Weight: 7\r\n\r\nok"), true)
	f.Add([]byte("HTTP/1.1 503 Busy\r\n\r\n"), false)
	f.Add([]byte("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n"), true)
	f.Add([]byte("HTTP/1.1 200 OK\r\nLvsd-Weight: -1\r\nLvsd-Weight: 0x10\r\n\r\n"), true)
	f.Add([]byte("HTTP/1.0 200\r\n"), false)
	f.Fuzz(func(t *testing.T, reply []byte, weights bool) {
		conn := &replyConn{r: bytes.NewReader(reply)}
		h, err := newHTTPChecker(&replyDialer{conns: []*replyConn{conn}}, netip.MustParseAddrPort("192.0.2.1:80"),
			&Check{Type: "http", ExpectBody: "ok", WeightHeader: weights}, 4)
		if err != nil {
			t.Fatal(err)
		}
		for range 2 { // the second round may run on the kept connection
			res := h.Check(context.Background())
			if res.OK == (res.Reason != "") {
				t.Fatalf("OK %v with reason %q", res.OK, res.Reason)
			}
			if res.OK && res.HasWeight && res.BadWeight == "" && res.Weight != NoWeight && (res.Weight < 0 || res.Weight > MaxWeight) {
				t.Fatalf("weight %d accepted", res.Weight)
			}
			if conn.read > maxHeaderBytes+maxBodyBytes {
				t.Fatalf("read %d bytes of one response, at most %d", conn.read, maxHeaderBytes+maxBodyBytes)
			}
			conn.read = 0
		}
		h.Close()
	})
}

func FuzzParseWeight(f *testing.F) {
	f.Add("10", "")
	f.Add(" 256 ", "256")
	f.Add("+1", "")
	f.Add("", "")
	f.Fuzz(func(t *testing.T, first, second string) {
		values := []string{first}
		if second != "" {
			values = append(values, second)
		}
		w, bad := parseWeight(values)
		if bad == "" && (w < 0 || w > MaxWeight) {
			t.Fatalf("parseWeight(%q) = %d, accepted", values, w)
		}
		if bad != "" && len(bad) > maxBadValue+len("…") && !strings.HasPrefix(bad, `"`) {
			t.Fatalf("bad value of %d bytes kept for the log", len(bad))
		}
		if !utf8.ValidString(bad) && utf8.ValidString(strings.Join(values, ", ")) {
			t.Fatalf("valid input cut into invalid UTF-8 %q", bad)
		}
	})
}

func FuzzDNSJudge(f *testing.F) {
	seed := func(b []byte) []byte { return b }
	f.Add(seed([]byte{0x12, 0x34, 0x81, 0x80, 0, 1, 0, 1, 0, 0, 0, 0}), uint16(0x1234), true)
	f.Add([]byte{}, uint16(0), false)
	f.Fuzz(func(t *testing.T, msg []byte, id uint16, wantAnswer bool) {
		c := &Check{Type: "dns", Query: "svc.example"}
		if wantAnswer {
			c.ExpectAnswer = netip.MustParseAddr("192.0.2.7")
		}
		d, err := newDNSChecker(nil, netip.MustParseAddrPort("192.0.2.1:53"), c)
		if err != nil {
			t.Fatal(err)
		}
		res, mine := d.judge(msg, id)
		if !mine && (res != Result{}) {
			t.Fatalf("a reply that is not ours judged %+v", res)
		}
		if mine && len(msg) >= 2 && binary.BigEndian.Uint16(msg) != id {
			t.Fatalf("reply with id %#x taken for query %#x", binary.BigEndian.Uint16(msg), id)
		}
		if res.OK == (res.Reason != "") && mine {
			t.Fatalf("OK %v with reason %q", res.OK, res.Reason)
		}
	})
}
