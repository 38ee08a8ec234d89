package director

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/lvsd/lvsd/agent"
	"github.com/lvsd/lvsd/arp"
	"github.com/lvsd/lvsd/arp/sysctl"
	"github.com/lvsd/lvsd/ipvs"
	"github.com/lvsd/lvsd/nat"
)

// syncBuffer is a log sink safe across goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// The health checks start once the first pass has reconciled, not with
// it (they would compete with it for the CPU), and then do run: a real TCP
// check reaches its backend.
func TestRunStartsChecksAfterFirstPass(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	defer ln.Close()
	var accepted atomic.Int32
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			c.Close()
		}
	}()
	port := ln.Addr().(*net.TCPAddr).Port
	dir := t.TempDir()
	must(t, os.MkdirAll(filepath.Join(dir, "services.d"), 0o755))
	must(t, os.WriteFile(filepath.Join(dir, "lvsd.yaml"), []byte("node: d1\ninterface: eth0\nservices_dir: services.d\n"+
		"state_dir: state\napi: {socket: "+filepath.Join(dir, "lvsd.sock")+"}\nmetrics: {listen: off}\n"+
		"health_checks: {max_in_flight: 4}\n"), 0o600))
	must(t, os.WriteFile(filepath.Join(dir, "services.d", "web.yaml"), []byte(fmt.Sprintf(
		"service: web\nvip: 192.0.2.10\nports: [80]\nhealth: {interval: 100ms, timeout: 100ms, checks: [{type: tcp, port: %d}]}\n"+
			"backends: [{address: 127.0.0.1}]\n", port)), 0o644))
	cfg, err := agent.LoadConfig(filepath.Join(dir, "lvsd.yaml"))
	must(t, err)
	ipvsFake := ipvs.NewFake()
	logs := &syncBuffer{}
	o := Options{
		ConfigPath: filepath.Join(dir, "lvsd.yaml"), Config: cfg, Log: slog.New(slog.NewTextHandler(logs, nil)),
		Kernel: agent.Kernel{IPVS: ipvsFake, Daemons: ipvsFake, NAT: nat.NewFake(), Sysctls: sysctl.NewFake(nil),
			Addrs: arp.NewFakeExpiring("eth0", "lo"), Announcer: &arp.FakeAnnouncer{}},
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Run(ctx, o) }()
	eventually(t, "a check reaching the backend", func() bool { return accepted.Load() > 0 })
	cancel()
	must(t, <-done)
	out := logs.String()
	reconciled, started := strings.Index(out, "msg=reconciled"), strings.Index(out, `msg="health checks started"`)
	if reconciled < 0 || started < reconciled {
		t.Errorf("want the first pass reconciled before the checks start:\n%s", out)
	}
	if !strings.Contains(out, "max_in_flight=4") {
		t.Errorf("health_checks.max_in_flight not used:\n%s", out)
	}
}
