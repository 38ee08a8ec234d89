//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lvsd/lvsd/e2e/topo"
)

// TestFullNATClientAddressUnmodifiedServer: an unmodified server program,
// busybox httpd, behind a FULLNAT service with client_address toa, logs each
// client's own address and port ("IP:PORT: url:/"), from 20 client sources,
// once the real server's lvsd has its programs in place; before, it logs the
// director's source address (the control).
func TestFullNATClientAddressUnmodifiedServer(t *testing.T) {
	busybox, err := exec.LookPath("busybox")
	if err != nil {
		t.Fatalf("busybox is not installed (e2e/vm/run --setup installs busybox-static): %v", err)
	}
	tp := topo.New(t, topo.WithClientSources(20))
	systemBPFFS(t)
	vip := netip.MustParseAddr("10.0.0.50")
	snat := netip.MustParseAddr("10.0.0.200")
	rs := tp.RS(1)
	dst := netip.AddrPortFrom(vip, 8080)

	d := newDirector(t, tp.Director(1), map[string]string{"httpd": fmt.Sprintf(
		"service: httpd\nvip: %s\nports: [8080]\nforwarding: fullnat\nfullnat: {source_addresses: [%s]}\nclient_address: toa\n"+
			"backends:\n  - {address: %s}\n", vip, snat, rs.V4)})
	d.start()
	d.waitServices(1, 1)
	d.waitLog(0, 15*time.Second, "op=toa-attach")

	startHTTPD := func() *httpdLog {
		root := t.TempDir()
		os.WriteFile(filepath.Join(root, "index.html"), []byte("hello\n"), 0o644)
		l := &httpdLog{}
		cmd := exec.Command(busybox, "httpd", "-f", "-vv", "-p", "8080", "-h", root)
		cmd.Stderr = l
		if err := rs.Start(cmd); err != nil {
			t.Fatal(err)
		}
		stop := func() { cmd.Process.Kill(); cmd.Wait() }
		t.Cleanup(stop)
		l.stop = stop
		waitFor(t, 10*time.Second, "busybox httpd listening", func() bool {
			_, err := httpGet(tp.Client(), netip.Addr{}, netip.AddrPortFrom(rs.V4, 8080))
			return err == nil
		})
		return l
	}

	// Control: without the real server's programs, the director's address.
	control := startHTTPD()
	local, err := httpGet(tp.Client(), tp.ClientSources(false)[0], dst)
	if err != nil {
		t.Fatal(err)
	}
	if logged := control.peers(); !slices.ContainsFunc(logged, func(p netip.AddrPort) bool { return p.Addr() == snat }) ||
		slices.Contains(logged, local) {
		t.Errorf("without the programs busybox httpd logged %v; want the director's %s, not the client's %s", logged, snat, local)
	}
	control.stop()

	agent := newRealServer(t, rs, fmt.Sprintf("  client_address:\n    mode: toa\n    directors: [%q]\n    backends: [%q]\n    cgroup: %s\n",
		snat.String(), netip.AddrPortFrom(rs.V4, 8080).String(), ownCgroup(t)))
	agent.start()
	agent.waitReady(0)
	agent.waitLog(0, 15*time.Second, "op=toa-attach")
	httpd := startHTTPD() // its listener opened after the programs
	var want []netip.AddrPort
	for _, src := range tp.ClientSources(false) {
		local, err := httpGet(tp.Client(), src, dst)
		if err != nil {
			t.Errorf("from %s: %v", src, err)
			continue
		}
		want = append(want, local)
	}
	waitFor(t, 5*time.Second, "busybox httpd's log of every request", func() bool {
		logged := httpd.peers()
		for _, w := range want {
			if !slices.Contains(logged, w) {
				return false
			}
		}
		return true
	})
	if logged := httpd.peers(); slices.ContainsFunc(logged, func(p netip.AddrPort) bool { return p.Addr() == snat }) {
		t.Errorf("busybox httpd logged the director's address with the programs in place: %v", logged)
	}
	t.Logf("busybox httpd logged %d requests with the clients' own addresses, e.g. %s", len(want), want[0])
}

// httpdLog collects busybox httpd's stderr.
type httpdLog struct {
	mu   sync.Mutex
	buf  bytes.Buffer
	stop func()
}

func (l *httpdLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

// peers are the peers of the log's requests ("[::ffff:10.0.0.100]:45765:
// url:/"), IPv4 unmapped.
func (l *httpdLog) peers() []netip.AddrPort {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []netip.AddrPort
	for _, line := range strings.Split(l.buf.String(), "\n") {
		if peer, _, ok := strings.Cut(line, ": url:"); ok {
			if p, err := netip.ParseAddrPort(peer); err == nil {
				out = append(out, netip.AddrPortFrom(p.Addr().Unmap(), p.Port()))
			}
		}
	}
	return out
}

// httpGet fetches / from dst over HTTP/1.0 from src (any if zero) on the
// client and returns the connection's local address.
func httpGet(client *topo.Host, src netip.Addr, dst netip.AddrPort) (netip.AddrPort, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, "tcp4", src, dst)
	if err != nil {
		return netip.AddrPort{}, err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	local := c.LocalAddr().(*net.TCPAddr).AddrPort()
	if _, err := io.WriteString(c, "GET / HTTP/1.0\r\n\r\n"); err != nil {
		return local, err
	}
	body, err := io.ReadAll(c)
	if err != nil {
		return local, err
	}
	if status, _, _ := bytes.Cut(body, []byte("\r\n")); !bytes.HasPrefix(status, []byte("HTTP/1.")) || !bytes.Contains(status, []byte(" 200")) {
		return local, fmt.Errorf("GET %s: %q", dst, body)
	}
	return local, nil
}
