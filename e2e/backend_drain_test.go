//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lvsd/lvsd/e2e/echo"
	"github.com/lvsd/lvsd/e2e/topo"
)

// TestDirectorBackendDrain: `lvsd backend drain web A` on a running
// director (issue #17, item 2). ipvsadm shows A at weight 0 (never
// deleted), the established connections to A keep exchanging without a
// reset, every new connection goes to B; a restarted lvsd keeps the drain
// and applies nothing; `lvsd backend undrain` gives A new connections
// again.
func TestDirectorBackendDrain(t *testing.T) {
	tp := topo.New(t, topo.WithClientSources(16))
	vip := netip.MustParseAddr("10.0.0.50")
	a, b := tp.RS(1), tp.RS(2)
	holdVIPOnLoopback(t, vip, a, b)
	serveEcho(t, echo.Config{TCP: []uint16{80}}, a, b)
	director := tp.Director(1)
	d := newDirector(t, director, map[string]string{"web": fmt.Sprintf(
		"service: web\nvip: %s\nports: [80]\nforwarding: dr\nbackends:\n  - {address: %s, weight: 100}\n  - {address: %s, weight: 100}\n",
		vip, a.V4, b.V4)})
	d.start()
	d.waitServices(1, 2)
	d.waitLog(0, 10*time.Second, "msg=reconciled")
	dst := netip.AddrPortFrom(vip, 80)
	sources := tp.ClientSources(false)

	// A fleet of established connections to A: connect until 8 landed
	// there (affinity none hashes the source port too), close the others.
	var streams []*stream
	defer func() {
		for _, s := range streams {
			s.stop()
		}
	}()
	for i := 0; len(streams) < 8; i++ {
		if i == 200 {
			t.Fatalf("200 connections, %d on %s: the scheduler does not spread", len(streams), a.ID)
		}
		conn, err := echo.Connect(context.Background(), tp.Client(), sources[i%len(sources)], dst)
		if err != nil {
			t.Fatal(err)
		}
		if conn.Hello.Name != a.ID {
			conn.Close()
			continue
		}
		streams = append(streams, startStream(conn))
	}
	waitEchoes(t, streams, 2)
	expectWeights(t, director, vip, map[netip.Addr]int{a.V4: 100, b.V4: 100})

	cfg := filepath.Join(d.dir, "lvsd.yaml")
	lvsdOK := func(args ...string) string {
		t.Helper()
		out, code := runLVSD(t, director, append([]string{"backend", "--config", cfg}, args...)...)
		if code != 0 {
			t.Fatalf("lvsd backend %s: exit %d: %s", strings.Join(args, " "), code, out)
		}
		t.Logf("lvsd backend %s:\n%s", strings.Join(args, " "), out)
		return out
	}
	if out := lvsdOK("drain", "web", a.V4.String()); !strings.Contains(out, "drained since") ||
		!strings.Contains(out, "weight 0 in the kernel") {
		t.Errorf("lvsd backend drain said:\n%s", out)
	}
	if out, code := runLVSD(t, director, "backend", "--config", cfg, "drain", "web", "10.9.9.9"); code != 1 ||
		!strings.Contains(out, `service "web" has no backend 10.9.9.9`) {
		t.Errorf("drain of an unknown backend: exit %d: %s", code, out)
	}
	expectWeights(t, director, vip, map[netip.Addr]int{a.V4: 0, b.V4: 100})
	waitEchoes(t, streams, 5) // fails at the first error: no reset
	expectOnly(t, "new connections while A is drained", ask(t, tp.Client(), sources, dst, echo.TCP, 3), b.ID)

	// A restart keeps the drain and changes nothing in the kernel.
	saved := ipvsSave(t, director)
	d.stop()
	r := &lvsd{t: t, host: director, dir: d.dir, logf: filepath.Join(d.dir, "lvsd-restarted.log")}
	r.start()
	if started := r.waitLog(0, 10*time.Second, "msg=starting"); !strings.Contains(started, "backend_overrides=1") {
		t.Errorf("the restarted lvsd did not read the override: %s", started)
	}
	r.barrier()
	r.barrier()
	if ops := appliedOps(r.log()); len(ops) > 0 {
		t.Errorf("the restarted lvsd applied ops, want none:\n%s", formatOps(ops))
	}
	if got := ipvsSave(t, director); got != saved {
		t.Errorf("after the restart ipvsadm -Sn changed:\nbefore:\n%s\nafter:\n%s", saved, got)
	}
	if out := lvsdOK("list"); !strings.Contains(out, a.V4.String()) || !strings.Contains(out, "drained") {
		t.Errorf("lvsd backend list after the restart:\n%s", out)
	}
	if out, code := runLVSD(t, director, "status", "--config", cfg); code != 0 || !strings.Contains(out, "drained") {
		t.Errorf("lvsd status after the restart: exit %d:\n%s", code, out)
	}
	waitEchoes(t, streams, 3)
	expectOnly(t, "new connections after the restart", ask(t, tp.Client(), sources, dst, echo.TCP, 3), b.ID)

	// Undrain: A takes new connections again.
	lvsdOK("undrain", "web", a.V4.String())
	expectWeights(t, director, vip, map[netip.Addr]int{a.V4: 100, b.V4: 100})
	expectFromClient(t, "new connections after undrain", ask(t, tp.Client(), sources, dst, echo.TCP, 3), nil, a.ID, b.ID)

	for i, s := range streams {
		n, err := s.stop()
		if err != nil {
			t.Errorf("connection %d to %s failed after %d echoes: %v", i, a.ID, n, err)
		}
	}
	t.Logf("%d connections to %s kept exchanging through drain, restart and undrain", len(streams), a.ID)
}

// expectWeights checks the destinations' weights as ipvsadm shows them.
func expectWeights(t *testing.T, h *topo.Host, vip netip.Addr, want map[netip.Addr]int) {
	t.Helper()
	saved := ipvsSave(t, h)
	for addr, w := range want {
		line := fmt.Sprintf("-a -t %s:80 -r %s:80 -g -w %d", vip, addr, w)
		if !strings.Contains(saved, line) {
			t.Errorf("ipvsadm -Sn has no %q:\n%s", line, saved)
		}
	}
}

// expectOnly checks every request was answered, by server only.
func expectOnly(t *testing.T, what string, results []result, server string) {
	t.Helper()
	dist := expectFromClient(t, what, results, nil, server)
	if len(dist) != 1 {
		t.Errorf("%s: answers from %s, want %s only", what, formatDistribution(dist), server)
	}
}
