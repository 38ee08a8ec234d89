//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/lvsd/lvsd/e2e/topo"
)

// startVRRPKeepalived runs keepalived (VRRP only, version 3, virtual
// router 51) on d with priority and advert, and returns a function that
// stops it (SIGTERM: it sends priority 0 and removes the VIP). The IPVS
// service must be there already.
func startVRRPKeepalived(t *testing.T, d *topo.Host, vip netip.Addr, priority int, advert time.Duration) func() {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "keepalived-"+d.ID)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	conf := fmt.Sprintf(`global_defs {
  router_id %s
  vrrp_version 3
}
vrrp_instance VI {
  state BACKUP
  interface %s
  virtual_router_id 51
  priority %d
  advert_int %s
  virtual_ipaddress {
    %s dev %s
  }
}
`, d.ID, d.Link, priority, strconv.FormatFloat(advert.Seconds(), 'f', -1, 64), netip.PrefixFrom(vip, vip.BitLen()), d.Link)
	writeFile(t, filepath.Join(dir, "keepalived.conf"), conf)
	logPath := filepath.Join(dir, "keepalived.log")
	logf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := d.Exec(context.Background(), "keepalived", "--vrrp", "--dont-fork", "--log-console", "--no-syslog",
		"-f", filepath.Join(dir, "keepalived.conf"), "-p", filepath.Join(dir, "ka.pid"),
		"-r", filepath.Join(dir, "vrrp.pid"), "-c", filepath.Join(dir, "checkers.pid"))
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatalf("keepalived on %v: %v", d, err)
	}
	logf.Close()
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	stop := func() {
		select {
		case <-done:
			return
		default:
		}
		_ = cmd.Process.Signal(os.Interrupt)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	}
	t.Cleanup(func() {
		stop()
		if keep := keepDir(t); keep != "" {
			b, _ := os.ReadFile(logPath)
			_ = os.WriteFile(filepath.Join(keep, fmt.Sprintf("keepalived-%s-%d.log", d.ID, priority)), b, 0o644)
		}
		if t.Failed() {
			b, _ := os.ReadFile(logPath)
			t.Logf("keepalived on %s (priority %d):\n%s", d.ID, priority, b)
		}
	})
	return stop
}
