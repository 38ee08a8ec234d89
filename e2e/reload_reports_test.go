//go:build e2e

package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/lvsd/lvsd/e2e/topo"
)

// TestReloadReports: `lvsd reload` (what systemctl reload runs) returns
// once the running agent has applied the files, and says when it did not:
// a broken service file is refused with its file and line and changes
// nothing; a new service is in the kernel when the command returns; a
// change the kernel side cannot apply (the state directory read-only, so
// the ownership record cannot be written ahead) fails the command and is
// applied once it can; a changed BGP peer is named as waiting for a
// restart, not ignored.
func TestReloadReports(t *testing.T) {
	tp := topo.New(t)
	director := tp.Director(1)
	svc := func(name, vip string) string {
		return "service: " + name + "\nvip: " + vip + "\nports: [80]\nforwarding: dr\nbackends:\n  - {address: " +
			tp.RS(1).V4.String() + "}\n"
	}
	d := newDirector(t, director, map[string]string{"web": svc("web", "10.0.0.50")})
	bgp := func(peerASN int) string {
		return "bgp:\n  asn: 65001\n  peers:\n    - {address: 10.0.0.99, asn: " + strconv.Itoa(peerASN) + "}\n"
	}
	agentFile, err := os.ReadFile(d.config())
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, d.config(), string(agentFile)+bgp(65000))
	d.start()
	d.waitServices(1, 1)
	d.waitLog(0, 10*time.Second, "msg=reconciled")
	services := func() int {
		svcs, err := d.ipvs().Services(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		return len(svcs)
	}
	reload := func() (string, int) { return runLVSD(t, director, "reload", "--config", d.config()) }
	dir := filepath.Join(d.dir, "services.d")

	writeFile(t, filepath.Join(dir, "bad.yaml"), "service: bad\nvip: 10.0.0.60\nports: [80]\nbackends:\n  - {address: nowhere}\n")
	out, code := reload()
	t.Logf("a broken file: exit %d: %s", code, strings.TrimSpace(out))
	if code != 1 || !strings.Contains(out, "bad.yaml:5") || !strings.Contains(out, "last good one") {
		t.Errorf("lvsd reload with a broken file: exit %d, %q; want 1 and the file's line", code, out)
	}
	if n := services(); n != 1 {
		t.Errorf("a refused reload changed the kernel: %d services", n)
	}
	os.Remove(filepath.Join(dir, "bad.yaml"))

	writeFile(t, filepath.Join(dir, "api.yaml"), svc("api", "10.0.0.51"))
	out, code = reload()
	t.Logf("a new service: exit %d: %s", code, strings.TrimSpace(out))
	if n := services(); code != 0 || n != 2 || !strings.Contains(out, "reloaded: 1 services changed") {
		t.Errorf("lvsd reload with a new service: exit %d, %q, %d services in the kernel when it returned; want 0 and 2", code, out, n)
	}

	state := filepath.Join(d.dir, "state")
	if err := unix.Mount(state, state, "", unix.MS_BIND, ""); err != nil {
		t.Fatal(err)
	}
	mounted := true
	unmount := func() {
		if mounted {
			mounted = false
			if err := unix.Unmount(state, 0); err != nil {
				t.Error(err)
			}
		}
	}
	t.Cleanup(unmount)
	if err := unix.Mount("", state, "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_RDONLY, ""); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, "dns.yaml"), svc("dns", "10.0.0.52"))
	out, code = reload()
	t.Logf("the state directory read-only: exit %d: %s", code, strings.TrimSpace(out))
	if code != 1 || !strings.Contains(out, "some changes failed") {
		t.Errorf("lvsd reload that cannot apply: exit %d, %q; want 1 and why", code, out)
	}
	unmount()
	deadline := time.Now().Add(30 * time.Second)
	for services() != 3 {
		if time.Now().After(deadline) {
			t.Fatalf("the failed change was not applied once it could: %d services", services())
		}
		time.Sleep(100 * time.Millisecond)
	}

	writeFile(t, d.config(), string(agentFile)+bgp(65002))
	out, code = reload()
	t.Logf("a changed BGP peer: exit %d: %s", code, strings.TrimSpace(out))
	if code != 0 || !strings.Contains(out, "after a restart") || !strings.Contains(out, "bgp") {
		t.Errorf("lvsd reload with a changed BGP peer: exit %d, %q; want 0 and bgp named as waiting for a restart", code, out)
	}
}
