//go:build e2e

package e2e

import (
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lvsd/lvsd/e2e/topo"
)

// TestPlanTakeover: `lvsd plan` on a standby shows nothing to do (the
// running agent holds no VIP), `lvsd plan --takeover` the takeover in
// order — FULLNAT conntrack restored, then the addresses, then their
// announcements —; once the owner fails and the standby has taken over,
// `lvsd plan` there shows nothing again: the takeover did exactly that.
func TestPlanTakeover(t *testing.T) {
	vip, full := netip.MustParseAddr("10.0.0.50"), netip.MustParseAddr("10.0.0.52")
	tp := clusterSetup(t, vip)
	key := clusterKey(t)
	var ds []*lvsd
	for i, d := range tp.Directors()[:2] {
		// Two of the three directors: quorum 1, so the standby takes over alone.
		l := newClusterDirector(t, tp, d, key, "  quorum: 1\n  priority: "+[]string{"200", "100"}[i]+"\n", vip)
		writeFile(t, filepath.Join(l.dir, "services.d", "full.yaml"), "service: full\nvip: "+full.String()+
			"\nports: [81]\nforwarding: fullnat\nfullnat: {source_addresses: [10.0.0.70]}\nbackends:\n  - {address: "+
			tp.RS(1).V4.String()+"}\n")
		l.start()
		ds = append(ds, l)
	}
	waitHolders(t, tp, vip, 30*time.Second, onlyOn("director"))
	waitHolders(t, tp, full, 5*time.Second, onlyOn("director"))
	standby := tp.Director(2)
	plan := func(args ...string) string {
		t.Helper()
		out, code := runLVSD(t, standby, append([]string{"plan", "--config", ds[1].config()}, args...)...)
		if code != 0 {
			t.Fatalf("lvsd plan %v: exit %d\n%s", args, code, out)
		}
		return out
	}
	if out := plan(); !strings.Contains(out, "no changes") {
		t.Errorf("plan on the standby:\n%s\nwant no changes (it holds no VIP)", out)
	}
	want := []string{
		"restore-conntrack [10.0.0.52] (before the addresses)",
		"add-address 10.0.0.50/32 dev eth0 (VIP held)",
		"add-address 10.0.0.52/32 dev eth0 (VIP held)",
		"add-address 10.0.0.70/32 dev eth0 (VIP held)",
		"announce 10.0.0.50/32 dev eth0",
		"announce 10.0.0.52/32 dev eth0",
		"announce 10.0.0.70/32 dev eth0",
	}
	if got := strings.Split(strings.TrimSpace(plan("--takeover")), "\n"); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("plan --takeover on the standby:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	// The same plans from a snapshot of the standby, made by nobody with a
	// copy of its configuration.
	offline := offlinePlanner(t, standby, ds[1])
	for _, args := range [][]string{nil, {"--takeover"}} {
		if got, want := offline(args...), plan(args...); got != want {
			t.Errorf("plan --from a snapshot, as nobody, %v:\n%s\nwant as on the host:\n%s", args, got, want)
		}
	}
	if err := tp.Director(1).SetPort(false); err != nil {
		t.Fatal(err)
	}
	// Cut off with quorum 1 the old owner keeps its addresses (as with VRRP);
	// nobody reaches it any more.
	onDirector2 := func(h []string) bool { return slices.Contains(h, "director2") }
	waitHolders(t, tp, vip, 5*time.Second, onDirector2)
	waitHolders(t, tp, full, 5*time.Second, onDirector2)
	ds[1].waitLog(0, 5*time.Second, "op=announce", "10.0.0.70/32")
	if out := plan(); !strings.Contains(out, "no changes") {
		t.Errorf("plan after the takeover:\n%s\nwant no changes", out)
	}
}

// offlinePlanner takes a snapshot of l's host and returns `lvsd plan
// --from` it run by user nobody (65534) with a copy of l's configuration
// nobody owns: what an operator runs on a laptop.
func offlinePlanner(t *testing.T, h *topo.Host, l *lvsd) func(args ...string) string {
	t.Helper()
	snap, code := runLVSD(t, h, "snapshot", "--config", l.config())
	if code != 0 {
		t.Fatalf("lvsd snapshot: exit %d\n%s", code, snap)
	}
	base := t.TempDir()
	for _, d := range []string{filepath.Dir(base), base} { // go test's temp folders are root's alone
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	dir := filepath.Join(base, "checkout")
	files := map[string]string{"snap.json": snap}
	for _, name := range []string{"lvsd.yaml", "cluster.key"} {
		files[name] = readFile(t, filepath.Join(l.dir, name))
	}
	services, err := filepath.Glob(filepath.Join(l.dir, "services.d", "*.yaml"))
	if err != nil || len(services) == 0 {
		t.Fatalf("no service files in %s: %v", l.dir, err)
	}
	for _, f := range services {
		files[filepath.Join("services.d", filepath.Base(f))] = readFile(t, f)
	}
	for name, body := range files {
		path := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		for p := path; p != base; p = filepath.Dir(p) {
			if err := os.Chown(p, 65534, 65534); err != nil {
				t.Fatal(err)
			}
		}
	}
	return func(args ...string) string {
		t.Helper()
		cmd := h.Exec(t.Context(), "setpriv", append([]string{"--reuid=65534", "--regid=65534", "--clear-groups", lvsdBin,
			"plan", "--config", filepath.Join(dir, "lvsd.yaml"), "--from", filepath.Join(dir, "snap.json")}, args...)...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%v: %v\n%s", cmd.Args, err, out)
		}
		return string(out)
	}
}
