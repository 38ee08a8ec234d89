//go:build e2e

package systemd

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lvsd/lvsd/e2e/echo"
	"github.com/lvsd/lvsd/e2e/topo"
)

// The director is the VM's root namespace: it holds directorAddr and the
// VIP on the topology's bridge, where lvsd.service runs.
var (
	directorAddr = netip.MustParsePrefix("10.0.0.254/24")
	vip          = netip.MustParseAddr("10.0.0.50")
)

const (
	agentFile = `# written by TestPackageSystemd
role: director
node: lvs-vm
interface: %s
log: {level: info}
`
	webOne = "service: web\nvip: 10.0.0.50\nports: [80]\nforwarding: dr\nbackends:\n  - {address: 10.0.0.11}\n"
	webTwo = webOne + "  - {address: 10.0.0.12}\n"
)

// TestPackageSystemd installs the .deb on a systemd-booted VM and runs lvsd
// the way an operator would: dpkg -i, systemctl, journalctl, curl /metrics,
// lvsd status, an edit plus systemctl reload, a reinstall (upgrade path:
// the edited conffile is kept, lvsd restarted), the same with a policy-rc.d
// that forbids it (lvsd left running), a removal, and a purge that keeps
// the operator's files.
func TestPackageSystemd(t *testing.T) {
	if comm, _ := os.ReadFile("/proc/1/comm"); strings.TrimSpace(string(comm)) != "systemd" {
		t.Fatalf("PID 1 is %q, not systemd: run this package with `make e2e` (e2e/vm/run --init systemd)", comm)
	}
	deb := findDeb(t)
	last := time.Now()
	phase := func(name string) { // where the time goes under TCG
		t.Logf("%-28s %5.1fs", name, time.Since(last).Seconds())
		last = time.Now()
	}
	t.Cleanup(func() {
		if t.Failed() {
			saveArtifacts(t)
		}
	})

	// man-db's dpkg trigger rebuilds the whole man index, ~10 s per dpkg run
	// under TCG; the flag file is its documented off switch (this VM's root
	// is a throw-away overlay).
	os.Remove("/var/lib/man-db/auto-update")
	// The VM boots the host's root, and a container host has a policy-rc.d
	// that forbids every service action (Docker's images ship one): here
	// the maintainer scripts must act, but for checkUpgradePolicyRC.
	os.Remove(policyRC)

	// Install.
	start := time.Now()
	out := sh(t, "dpkg", "-i", deb)
	t.Logf("dpkg -i %s (%.1fs):\n%s", filepath.Base(deb), time.Since(start).Seconds(), out)
	if !strings.Contains(out, "systemctl enable --now lvsd") {
		t.Errorf("postinst did not tell the operator how to start lvsd:\n%s", out)
	}
	for _, f := range []string{"/usr/sbin/lvsd", "/usr/lib/systemd/system/lvsd.service", "/usr/lib/modules-load.d/lvsd.conf",
		"/etc/lvsd/lvsd.yaml", "/usr/share/man/man8/lvsd.8.gz", "/usr/share/doc/lvsd/examples/services.d/web.yaml",
		"/usr/share/bash-completion/completions/lvsd", "/usr/share/doc/lvsd/examples/prometheus/lvsd-alerts.yaml",
		"/usr/share/doc/lvsd/examples/prometheus/lvsd-dashboard.json"} {
		if _, err := os.Stat(f); err != nil {
			t.Errorf("installed package lacks %s", f)
		}
	}
	if fi, err := os.Stat("/etc/lvsd/identity.key"); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("postinst did not make the director's identity /etc/lvsd/identity.key, mode 0600: %v", err)
	} else if pub, err := try("/usr/sbin/lvsd", "keygen", "--public", "/etc/lvsd/identity.key"); err != nil || len(strings.TrimSpace(pub)) != 44 {
		t.Errorf("lvsd keygen --public /etc/lvsd/identity.key: %v: %s", err, pub)
	}
	if state := unitProp(t, "lvsd.service", "UnitFileState"); state != "disabled" {
		t.Errorf("after install lvsd.service is %q; a fresh install must not enable an unconfigured director", state)
	}
	if out, err := try("systemd-analyze", "verify", "lvsd.service"); err != nil || strings.TrimSpace(out) != "" {
		t.Errorf("systemd-analyze verify lvsd.service: %v\n%s", err, out)
	}
	t.Logf("systemd-analyze security lvsd.service: %s", lastLine(sh(t, "systemd-analyze", "security", "--no-pager", "lvsd.service")))
	phase("install and verify")

	// The network: client and real servers in namespaces on a bridge of
	// the root namespace, which is the director.
	tp := topo.New(t, topo.WithClientSources(0), topo.WithRealServers(2))
	var root *topo.Host
	if err := root.AddAddr(directorAddr, tp.Bridge); err != nil {
		t.Fatal(err)
	}
	rs1, rs2 := tp.RS(1), tp.RS(2)
	for _, rs := range []*topo.Host{rs1, rs2} {
		holdVIP(t, rs)
		s, err := echo.Serve(context.Background(), rs, rs.ID, echo.Config{TCP: []uint16{80}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
	}

	// Configure and start.
	writeFile(t, "/etc/lvsd/lvsd.yaml", fmt.Sprintf(agentFile, tp.Bridge))
	writeFile(t, "/etc/lvsd/services.d/web.yaml", webOne)
	sh(t, "systemctl", "enable", "--now", "lvsd.service")
	// Type=notify: start returned after READY=1, i.e. after the first pass.
	if got := unitProp(t, "lvsd.service", "ActiveState"); got != "active" {
		t.Fatalf("lvsd.service is %s after systemctl start", got)
	}
	if got := unitProp(t, "lvsd.service", "StatusText"); !strings.Contains(got, "1 IPVS services") {
		t.Errorf("StatusText %q does not report the first pass", got)
	}
	if got := unitProp(t, "lvsd.service", "WatchdogUSec"); got != "30s" {
		t.Errorf("WatchdogUSec = %q, want 30s", got)
	}
	table := sh(t, "ipvsadm", "-Ln")
	if !strings.Contains(table, "10.0.0.11:80") || !strings.Contains(table, "Route") {
		t.Fatalf("ipvsadm -Ln right after systemctl start:\n%s", table)
	}
	checkSandbox(t)
	phase("topology, start")
	expectFrom(t, tp.Client(), 12, "rs1")
	checkJournal(t)
	phase("traffic, journal")

	// An invalid edit: systemctl reload fails and says why, lvsd goes on
	// with the last good configuration.
	writeFile(t, "/etc/lvsd/services.d/bad.yaml", "service: bad\nvip: 10.0.0.60\n")
	if out, err := try("systemctl", "reload", "lvsd.service"); err == nil {
		t.Errorf("systemctl reload accepted an invalid service file:\n%s", out)
	}
	if st := sh(t, "systemctl", "status", "--no-pager", "-n", "20", "lvsd.service"); !strings.Contains(st, "bad.yaml:") {
		t.Errorf("systemctl status does not show the file:line:col error:\n%s", st)
	}
	if got := unitProp(t, "lvsd.service", "ActiveState"); got != "active" {
		t.Fatalf("lvsd.service is %s after a rejected reload", got)
	}
	checkReloadMetric(t, 0)
	os.Remove("/etc/lvsd/services.d/bad.yaml")

	// An edit and systemctl reload apply the new backend, and the reload
	// returns once they did (lvsd reload waits for the apply): the kernel
	// has rs2 when it returns, before the file watch would have seen the
	// edit settle.
	writeFile(t, "/etc/lvsd/services.d/web.yaml", webTwo)
	sh(t, "systemctl", "reload", "lvsd.service")
	if table := sh(t, "ipvsadm", "-Ln"); !strings.Contains(table, "10.0.0.12:80") {
		t.Errorf("systemctl reload returned before the kernel had the new backend:\n%s", table)
	}
	eventually(t, 5*time.Second, "the reload by request in the journal", func() error {
		for _, e := range journal(t) {
			if e["MESSAGE"] == "configuration reloaded" && e["TRIGGER"] == "request" {
				return nil
			}
		}
		return errors.New(`no "configuration reloaded" with TRIGGER=request`)
	})
	expectFrom(t, tp.Client(), 24, "rs1", "rs2")
	checkReloadMetric(t, 1)
	phase("reload")

	status := sh(t, "lvsd", "status")
	t.Logf("lvsd status:\n%s", status)
	for _, want := range []string{"director lvs-vm", "web", "TCP  10.0.0.50:80", "-> 10.0.0.11:80", "Route", "VIP held"} {
		if !strings.Contains(status, want) {
			t.Errorf("lvsd status lacks %q", want)
		}
	}
	if js := sh(t, "lvsd", "status", "--json"); !strings.Contains(js, `"address": "10.0.0.12:80"`) {
		t.Errorf("lvsd status --json:\n%s", js)
	}

	metrics := sh(t, "curl", "-fsS", "http://127.0.0.1:9610/metrics")
	for _, want := range []string{
		`lvsd_ready 1`,
		`lvsd_service_in_kernel{ipvs_service="tcp:10.0.0.50:80",service="web"} 1`,
		`lvsd_backend_weight{backend="10.0.0.12:80",ipvs_service="tcp:10.0.0.50:80",service="web"} 1`,
		`lvsd_backend_connections_total{backend="10.0.0.11:80",ipvs_service="tcp:10.0.0.50:80",service="web"}`,
		`lvsd_reconcile_duration_seconds_count`,
		`process_resident_memory_bytes`,
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	checkKernelCounters(t, "10.0.0.11:80")
	phase("status, metrics")
	if n := metricValue(metrics, `lvsd_backend_connections_total{backend="10.0.0.11:80",ipvs_service="tcp:10.0.0.50:80",service="web"}`); n < 1 {
		t.Errorf("lvsd_backend_connections_total for rs1 is %v after traffic", n)
	}

	// Reinstalling is the upgrade path: the edited conffile stays, a running
	// lvsd is restarted (and adopts the kernel state), traffic goes on.
	pid := unitProp(t, "lvsd.service", "MainPID")
	out = sh(t, "dpkg", "-i", deb)
	if b, _ := os.ReadFile("/etc/lvsd/lvsd.yaml"); !strings.Contains(string(b), "written by TestPackageSystemd") {
		t.Errorf("the reinstall replaced the edited /etc/lvsd/lvsd.yaml:\n%s\ndpkg:\n%s", b, out)
	}
	eventually(t, 15*time.Second, "lvsd restarted by the upgrade", func() error {
		if p, st := unitProp(t, "lvsd.service", "MainPID"), unitProp(t, "lvsd.service", "ActiveState"); p == pid || p == "0" || st != "active" {
			return fmt.Errorf("MainPID %s (was %s), %s", p, pid, st)
		}
		return nil
	})
	if n := unitProp(t, "lvsd.service", "NRestarts"); n != "0" {
		t.Errorf("NRestarts = %s: lvsd failed (or its watchdog fired) at some point", n)
	}
	expectFrom(t, tp.Client(), 24, "rs1", "rs2") // 12 all on one server: 1 run in 2,048
	phase("upgrade")
	checkUpgradePolicyRC(t, deb)
	phase("upgrade under policy-rc.d")
	checkWatchdog(t)
	phase("watchdog")

	checkRemoveReinstall(t, deb)
	expectFrom(t, tp.Client(), 24, "rs1", "rs2") // 12 all on one server: 1 run in 2,048
	phase("remove, reinstall")

	checkPurge(t)
	phase("purge")
}

// checkWatchdog: an lvsd that stops answering is killed by the watchdog
// and restarted, and the restarted one adopts the kernel state. A runtime
// drop-in shortens the watchdog (and the wait for the abort) to keep the
// test short; SIGSTOP freezes lvsd as a hang would.
func checkWatchdog(t *testing.T) {
	t.Helper()
	dropIn := "/run/systemd/system/lvsd.service.d/watchdog-test.conf"
	if err := os.MkdirAll(filepath.Dir(dropIn), 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, dropIn, "[Service]\nWatchdogSec=3s\nTimeoutAbortSec=2s\n")
	// Removed at the end without a daemon-reload (seconds under TCG): the
	// purge that follows reloads anyway.
	defer os.Remove(dropIn)
	sh(t, "systemctl", "daemon-reload")
	sh(t, "systemctl", "restart", "lvsd.service")
	before := unitProp(t, "lvsd.service", "NRestarts")
	pid := unitProp(t, "lvsd.service", "MainPID")
	time.Sleep(4 * time.Second) // fed while alive: no restart
	if n := unitProp(t, "lvsd.service", "NRestarts"); n != before {
		t.Fatalf("lvsd was restarted while healthy (NRestarts %s -> %s)", before, n)
	}
	sh(t, "kill", "-STOP", pid)
	eventually(t, 30*time.Second, "the watchdog restarting a frozen lvsd", func() error {
		p, st, n := unitProp(t, "lvsd.service", "MainPID"), unitProp(t, "lvsd.service", "ActiveState"),
			unitProp(t, "lvsd.service", "NRestarts")
		if p == pid || p == "0" || st != "active" || n == before {
			return fmt.Errorf("MainPID %s (frozen %s), %s, NRestarts %s", p, pid, st, n)
		}
		return nil
	})
	found := false
	for _, e := range journal(t) {
		if m, _ := e["MESSAGE"].(string); strings.Contains(m, "Watchdog timeout") {
			found = true
		}
	}
	if !found {
		t.Error("the journal does not say the watchdog fired")
	}
}

// checkJournal: lvsd's records are in the journal with one upper-case field
// per attribute, not as text lines.
func checkJournal(t *testing.T) {
	t.Helper()
	var applied, starting map[string]any
	eventually(t, 10*time.Second, "lvsd's structured records in the journal", func() error {
		applied, starting = nil, nil
		for _, e := range journal(t) {
			if m, _ := e["MESSAGE"].(string); strings.HasPrefix(m, "time=") || strings.HasPrefix(m, "level=") {
				t.Errorf("a text log line reached the journal instead of fields: %q", m)
			}
			switch e["MESSAGE"] {
			case "failed": // the unit's sandbox must let lvsd set what it needs
				if e["OP"] == "set-sysctl" {
					t.Errorf("lvsd could not set a sysctl under systemd: %v: %v", e["OBJECT"], e["ERR"])
				}
			case "applied":
				if applied == nil && e["OP"] == "add-service" {
					applied = e
				}
			case "starting":
				starting = e
			}
		}
		if applied == nil || starting == nil {
			return fmt.Errorf("no \"starting\" or \"applied\" add-service entry yet")
		}
		return nil
	})
	for k, want := range map[string]string{"SYSLOG_IDENTIFIER": "lvsd", "PRIORITY": "6", "_SYSTEMD_UNIT": "lvsd.service",
		"OP": "add-service"} {
		if got, _ := applied[k].(string); got != want {
			t.Errorf("journal entry %q: %s=%q, want %q", "applied", k, got, want)
		}
	}
	if obj, _ := applied["OBJECT"].(string); !strings.Contains(obj, "tcp:10.0.0.50:80") {
		t.Errorf("journal entry \"applied\": OBJECT=%q", obj)
	}
	if f, _ := applied["CODE_FUNC"].(string); !strings.Contains(f, "agent") {
		t.Errorf("journal entry \"applied\": CODE_FUNC=%q", f)
	}
	if cfg, _ := starting["CONFIG"].(string); cfg != "/etc/lvsd/lvsd.yaml" {
		t.Errorf("journal entry \"starting\": CONFIG=%q", cfg)
	}
	if _, ok := starting["SERVICES"]; !ok {
		t.Errorf("journal entry \"starting\" has no SERVICES field: %v", starting)
	}
}

// expectFrom makes n TCP connections from the client to the VIP and checks
// that each was answered by one of names, that every one of names answered,
// and that the servers saw the client's own address (DR).
func expectFrom(t *testing.T, client *topo.Host, n int, names ...string) {
	t.Helper()
	seen := map[string]int{}
	for i := 0; i < n; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		r, err := echo.Ask(ctx, client, netip.Addr{}, netip.AddrPortFrom(vip, 80), echo.TCP)
		cancel()
		if err != nil {
			t.Fatalf("connection %d to %s:80: %v", i, vip, err)
		}
		if r.Peer.Addr() != client.V4 {
			t.Errorf("%s saw the client as %s, want %s", r.Name, r.Peer.Addr(), client.V4)
		}
		seen[r.Name]++
	}
	for _, name := range names {
		if seen[name] == 0 {
			t.Errorf("no connection reached %s: %v", name, seen)
		}
		delete(seen, name)
	}
	if len(seen) > 0 {
		t.Errorf("connections reached unexpected servers: %v", seen)
	}
}

// holdVIP does what a DR real server needs: the VIP on lo, no ARP for it.
func holdVIP(t *testing.T, rs *topo.Host) {
	t.Helper()
	for _, kv := range [][2]string{{"net/ipv4/conf/all/arp_ignore", "1"}, {"net/ipv4/conf/all/arp_announce", "2"}} {
		if err := rs.Sysctl(kv[0], kv[1]); err != nil {
			t.Fatal(err)
		}
	}
	if err := rs.AddAddr(netip.PrefixFrom(vip, 32), "lo"); err != nil {
		t.Fatal(err)
	}
}

// findDeb returns the .deb `make package` built (LVSD_PKG_DIR).
func findDeb(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("LVSD_PKG_DIR")
	if dir == "" {
		t.Fatal("LVSD_PKG_DIR is not set: run this test with `make e2e`")
	}
	debs, _ := filepath.Glob(filepath.Join(dir, "lvsd_*.deb"))
	if len(debs) != 1 {
		t.Fatalf("want one lvsd_*.deb in %s, found %v", dir, debs)
	}
	return debs[0]
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

// metricValue is the value of the series whose line starts with series, or
// -1.
func metricValue(exposition, series string) float64 {
	for _, line := range strings.Split(exposition, "\n") {
		if rest, ok := strings.CutPrefix(line, series+" "); ok {
			var v float64
			if _, err := fmt.Sscan(rest, &v); err == nil {
				return v
			}
		}
	}
	return -1
}

// checkSandbox: lvsd set its sysctls under the unit (checkJournal fails on
// a set-sysctl that failed), and from inside its mount namespace /proc/sys
// is writable only below net: kernel.core_pattern is not.
func checkSandbox(t *testing.T) {
	t.Helper()
	pid := unitProp(t, "lvsd.service", "MainPID")
	if got := strings.TrimSpace(sh(t, "cat", "/proc/sys/net/ipv4/vs/expire_nodest_conn")); got != "1" {
		t.Errorf("net.ipv4.vs.expire_nodest_conn=%s under the unit, want 1 (set by lvsd)", got)
	}
	in := func(cmd string) error {
		_, err := try("nsenter", "-t", pid, "-m", "--", "sh", "-c", cmd)
		return err
	}
	if err := in("echo 1 > /proc/sys/net/ipv4/vs/expire_nodest_conn"); err != nil {
		t.Errorf("lvsd's mount namespace cannot write /proc/sys/net: %v", err)
	}
	if err := in("cat /proc/sys/kernel/core_pattern > /proc/sys/kernel/core_pattern"); err == nil {
		t.Error("lvsd's mount namespace can write /proc/sys/kernel/core_pattern; ProtectKernelTunables is not in force")
	}
}

// wantsLink is what systemctl enable lvsd makes.
const wantsLink = "/etc/systemd/system/multi-user.target.wants/lvsd.service"

// checkRemoveReinstall: dpkg -r stops lvsd but keeps it enabled and keeps
// the configuration, as Debian packages do until purge; a reinstall finds
// it enabled, says how to start it, and systemctl start brings it back.
func checkRemoveReinstall(t *testing.T, deb string) {
	t.Helper()
	sh(t, "dpkg", "-r", "lvsd")
	if got := unitProp(t, "lvsd.service", "ActiveState"); got != "inactive" {
		t.Errorf("after dpkg -r lvsd.service is %s", got)
	}
	if _, err := os.Lstat(wantsLink); err != nil {
		t.Errorf("dpkg -r dropped the enabled state: %v", err)
	}
	for _, kept := range []string{"/etc/lvsd/lvsd.yaml", "/etc/lvsd/services.d/web.yaml"} {
		if _, err := os.Stat(kept); err != nil {
			t.Errorf("dpkg -r removed %s", kept)
		}
	}
	out := sh(t, "dpkg", "-i", deb)
	if !strings.Contains(out, "'systemctl start lvsd' starts it now") {
		t.Errorf("the reinstall did not say lvsd.service is still enabled:\n%s", out)
	}
	if got := unitProp(t, "lvsd.service", "UnitFileState"); got != "enabled" {
		t.Errorf("after the reinstall lvsd.service is %q, want enabled", got)
	}
	sh(t, "systemctl", "start", "lvsd.service")
	if got := unitProp(t, "lvsd.service", "ActiveState"); got != "active" {
		t.Fatalf("lvsd.service is %s after systemctl start", got)
	}
}

// policyRC is where Debian's invoke-rc.d and deb-systemd-invoke ask whether
// a maintainer script may act on a service.
const policyRC = "/usr/sbin/policy-rc.d"

// checkUpgradePolicyRC: an upgrade while /usr/sbin/policy-rc.d forbids
// touching services (exit 101, as in chroots and image builds) leaves the
// running lvsd alone: the maintainer scripts go through deb-systemd-invoke.
func checkUpgradePolicyRC(t *testing.T, deb string) {
	t.Helper()
	if err := os.WriteFile(policyRC, []byte("#!/bin/sh\nexit 101\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	defer os.Remove(policyRC)
	pid, restarts := unitProp(t, "lvsd.service", "MainPID"), unitProp(t, "lvsd.service", "NRestarts")
	out := sh(t, "dpkg", "-i", deb)
	if p, st := unitProp(t, "lvsd.service", "MainPID"), unitProp(t, "lvsd.service", "ActiveState"); p != pid || st != "active" {
		t.Errorf("with policy-rc.d exiting 101 the upgrade touched lvsd: MainPID %s (was %s), %s\ndpkg:\n%s", p, pid, st, out)
	}
	if n := unitProp(t, "lvsd.service", "NRestarts"); n != restarts {
		t.Errorf("NRestarts %s -> %s across the upgrade under policy-rc.d", restarts, n)
	}
}

// checkPurge: dpkg --purge stops and disables the unit and removes what the
// package and lvsd made (the conffile, the state folder, the identity
// postinst made), but not the
// operator's service file and key in /etc/lvsd; the kernel state stays
// (the director's traffic goes on until the operator removes it).
func checkPurge(t *testing.T) {
	t.Helper()
	const key = "/etc/lvsd/cluster.key"
	writeFile(t, key, "c2VjcmV0LWtleS1mb3ItdGhlLWNsdXN0ZXItMzI=\n")
	if _, err := os.Stat("/var/lib/lvsd"); err != nil {
		t.Errorf("before purge: %v (lvsd keeps its record there)", err)
	}
	out := sh(t, "dpkg", "--purge", "lvsd")
	t.Logf("dpkg --purge:\n%s", out)
	if _, err := os.Lstat(wantsLink); err == nil {
		t.Errorf("dpkg --purge left %s: the unit stays enabled", wantsLink)
	}
	if _, err := os.Stat("/usr/lib/systemd/system/lvsd.service"); err == nil {
		t.Error("the unit file survived dpkg --purge")
	}
	if got := unitProp(t, "lvsd.service", "ActiveState"); got != "inactive" {
		t.Errorf("after purge lvsd.service is %s", got)
	}
	for _, gone := range []string{"/etc/lvsd/lvsd.yaml", "/var/lib/lvsd", "/etc/lvsd/identity.key"} {
		if _, err := os.Stat(gone); err == nil {
			t.Errorf("%s survived dpkg --purge", gone)
		}
	}
	for _, kept := range []string{"/etc/lvsd/services.d/web.yaml", key} {
		if _, err := os.Stat(kept); err != nil {
			t.Errorf("dpkg --purge removed the operator's %s", kept)
		}
	}
	if table := sh(t, "ipvsadm", "-Ln"); !strings.Contains(table, "10.0.0.12:80") {
		t.Errorf("stopping lvsd removed the IPVS service:\n%s", table)
	}
}
