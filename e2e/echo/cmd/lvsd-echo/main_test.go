package main

import (
	"bufio"
	"context"
	"net/netip"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lvsd/lvsd/e2e/echo"
	"github.com/lvsd/lvsd/e2e/topo"
)

// The test binary doubles as lvsd-echo, so the standalone path is tested
// the way the demo uses it (a separate process under `ip netns exec`)
// without a go build at test time.
func TestMain(m *testing.M) {
	if os.Getenv("LVSD_ECHO_AS_MAIN") == "1" {
		main()
		return
	}
	os.Exit(m.Run())
}

func TestStandalone(t *testing.T) {
	tp := topo.New(t, topo.WithClientSources(1))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd := tp.RS(1).Exec(ctx, os.Args[0], "-name", "rs1", "-tcp", "80,8080", "-http", "8000", "-udp", "53")
	// GORACE: a -race child would otherwise sleep 1 s at exit.
	cmd.Env = append(os.Environ(), "LVSD_ECHO_AS_MAIN=1", "GORACE=atexit_sleep_ms=0")
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	defer cmd.Process.Kill()
	ready, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil || !strings.HasPrefix(ready, "lvsd-echo ready name=rs1 ") {
		t.Fatalf("ready line %q %v", ready, err)
	}
	src := tp.ClientSources(true)[0]
	for proto, port := range map[string]uint16{echo.TCP: 8080, echo.HTTP: 8000, echo.UDP: 53} {
		dst := netip.AddrPortFrom(tp.RS(1).V6, port)
		r, err := echo.Ask(ctx, tp.Client(), src, dst, proto)
		if err != nil || r.Name != "rs1" || r.Peer.Addr() != src || r.Local != dst {
			t.Errorf("%s: %+v %v", proto, r, err)
		}
	}
	// SIGTERM is a clean stop.
	cmd.Process.Signal(syscall.SIGTERM)
	if err := cmd.Wait(); err != nil {
		t.Errorf("exit after SIGTERM: %v", err)
	}
}

func TestPorts(t *testing.T) {
	if p, err := ports(" 80, 8080,,"); err != nil || len(p) != 2 || p[1] != 8080 {
		t.Errorf("ports: %v %v", p, err)
	}
	for _, bad := range []string{"x", "0", "70000", "-1"} {
		if _, err := ports(bad); err == nil {
			t.Errorf("ports(%q) accepted", bad)
		}
	}
	if err := run(context.Background(), nil, os.Stdout); err == nil {
		t.Error("run without ports succeeded")
	}
}
