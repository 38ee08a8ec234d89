//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lvsd/lvsd/e2e/topo"
)

// keepalivedSamples holds the configurations the keepalived package ships
// (GPL-2.0: read from the installed package, never copied here).
const keepalivedSamples = "/usr/share/doc/keepalived/samples"

// TestImportMatchesKeepalived: for every sample keepalived ships with
// virtual servers, keepalived's own IPVS table and the table lvsd programs
// from `lvsd import keepalived` of the same file are the same, line for
// line of `ipvsadm -Sn`. The checkers are taken out of both (nothing
// answers them in the VM, and there the two differ by design: keepalived
// deletes a failed real server, lvsd keeps it at weight 0), so what is
// compared is the mapping of services, schedulers, persistence,
// forwarding, ports, weights and thresholds.
func TestImportMatchesKeepalived(t *testing.T) {
	if _, err := exec.LookPath("keepalived"); err != nil {
		t.Fatalf("keepalived is not installed (e2e/vm/run --setup installs it): %v", err)
	}
	files, _ := filepath.Glob(filepath.Join(keepalivedSamples, "keepalived.conf.*"))
	var samples []string
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err == nil && strings.Contains(string(b), "\nvirtual_server ") {
			samples = append(samples, f)
		}
	}
	if len(samples) == 0 {
		t.Fatalf("no keepalived sample with a virtual_server in %s: install keepalived", keepalivedSamples)
	}
	tp := topo.New(t, topo.WithClientSources(0))
	director := tp.Director(1)
	var matched, compared int
	var notCompared []string
	for _, sample := range samples {
		name := strings.TrimPrefix(filepath.Base(sample), "keepalived.conf.")
		t.Run(name, func(t *testing.T) {
			dir := testDir(t)
			conf := filepath.Join(dir, "keepalived.conf")
			src, err := os.ReadFile(sample)
			if err != nil {
				t.Fatal(err)
			}
			writeFile(t, conf, withoutCheckers(string(src)))

			want := keepalivedTable(t, director, dir, conf)
			run(t, director, "ipvsadm", "-C")
			out, code := runLVSD(t, director, "import", "keepalived", conf, "--out", filepath.Join(dir, "import"))
			if code != 0 {
				t.Fatalf("lvsd import keepalived exited %d:\n%s", code, out)
			}
			services := map[string]string{}
			imported, _ := filepath.Glob(filepath.Join(dir, "import", "services.d", "*.yaml"))
			for _, f := range imported {
				b, err := os.ReadFile(f)
				if err != nil {
					t.Fatal(err)
				}
				services[strings.TrimSuffix(filepath.Base(f), ".yaml")] = string(b)
			}
			wantMapped := slices.DeleteFunc(slices.Clone(want), func(l string) bool { return strings.Contains(l, " -f ") })
			if len(services) == 0 {
				notCompared = append(notCompared, fmt.Sprintf("%s (%d fwmark lines: lvsd marks its own packets)", name, len(want)-len(wantMapped)))
				if len(wantMapped) != 0 {
					t.Errorf("nothing was imported, yet keepalived programmed\n%s", strings.Join(wantMapped, "\n"))
				}
				return
			}
			compared++
			l := newDirector(t, director, services)
			l.start()
			got := waitTable(t, director, wantMapped, 60*time.Second)
			l.stop()
			run(t, director, "ipvsadm", "-C")
			if !slices.Equal(got, wantMapped) {
				t.Errorf("lvsd programmed\n%s\nkeepalived programmed\n%s\nimport report:\n%s", strings.Join(got, "\n"), strings.Join(wantMapped, "\n"), out)
				return
			}
			matched++
			t.Logf("%s: %d lines of ipvsadm -Sn identical", name, len(got))
		})
	}
	t.Logf("keepalived samples with virtual servers: %d; compared %d, matched %d; not compared: %s",
		len(samples), compared, matched, strings.Join(notCompared, ", "))
}

// withoutCheckers removes the checker blocks of a keepalived.conf: each
// line that opens a block of a checker keyword up to the line closing it.
func withoutCheckers(conf string) string {
	checkers := []string{"HTTP_GET", "SSL_GET", "TCP_CHECK", "SMTP_CHECK", "DNS_CHECK", "MISC_CHECK", "UDP_CHECK", "PING_CHECK", "BFD_CHECK", "FILE_CHECK"}
	var out []string
	depth := 0 // inside a checker block: its depth
	for _, line := range strings.Split(conf, "\n") {
		code := line
		if i := strings.IndexAny(code, "#!"); i >= 0 {
			code = code[:i]
		}
		opens, closes := strings.Count(code, "{"), strings.Count(code, "}")
		if depth == 0 {
			f := strings.Fields(code)
			if len(f) > 0 && slices.Contains(checkers, f[0]) && opens > closes {
				depth = opens - closes
				continue
			}
			out = append(out, line)
			continue
		}
		depth += opens - closes
	}
	return strings.Join(out, "\n")
}

// keepalivedTable runs keepalived's checker process on conf in h's
// namespace until its IPVS table stops changing, stops it and returns the
// table (ipvsadm -Sn, sorted, without lo's services).
func keepalivedTable(t *testing.T, h *topo.Host, dir, conf string) []string {
	t.Helper()
	logf, err := os.Create(filepath.Join(dir, "keepalived.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := h.Exec(context.Background(), "keepalived", "--check", "--dont-fork", "--log-console", "--no-syslog",
		"-f", conf, "-p", filepath.Join(dir, "ka.pid"), "-r", filepath.Join(dir, "vrrp.pid"), "-c", filepath.Join(dir, "checkers.pid"))
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatalf("keepalived on %v: %v", h, err)
	}
	logf.Close()
	defer func() {
		_ = cmd.Process.Signal(os.Interrupt)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	}()
	var last []string
	stableSince := time.Now()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		now := normalTable(ipvsSave(t, h))
		if !slices.Equal(now, last) {
			last, stableSince = now, time.Now()
		} else if len(now) > 0 && time.Since(stableSince) > 2*time.Second {
			return now
		}
		time.Sleep(200 * time.Millisecond)
	}
	log, _ := os.ReadFile(filepath.Join(dir, "keepalived.log"))
	t.Fatalf("keepalived's table did not settle within 30s (now %q); its log:\n%s", last, log)
	return nil
}

// normalTable is ipvsadm -Sn as sorted lines, without services on
// loopback addresses (connection sync's).
func normalTable(save string) []string {
	var out []string
	for _, l := range strings.Split(save, "\n") {
		l = strings.TrimSpace(l)
		if l == "" || strings.Contains(l, " 127.0.0.1:") {
			continue
		}
		out = append(out, l)
	}
	slices.Sort(out)
	return out
}

// waitTable waits until h's IPVS table is want, and returns it as it is at
// the end.
func waitTable(t *testing.T, h *topo.Host, want []string, timeout time.Duration) []string {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		got := normalTable(ipvsSave(t, h))
		if slices.Equal(got, want) || time.Now().After(deadline) {
			return got
		}
		time.Sleep(300 * time.Millisecond)
	}
}

// TestImportIPVSRoundTrip: a 1,000-service table restored with ipvsadm -R,
// imported from the kernel by `lvsd import ipvsadm`, run by lvsd: lvsd
// adopts it without a change (`lvsd plan` has nothing to do, ipvsadm -Sn is
// the same).
func TestImportIPVSRoundTrip(t *testing.T) {
	tp := topo.New(t, topo.WithClientSources(0))
	director := tp.Director(1)
	runInput(t, director, ipvsTable(1000), "ipvsadm", "-R")
	before := normalTable(ipvsSave(t, director))
	if len(before) != 4000 {
		t.Fatalf("ipvsadm -R of 1,000 services with 3 real servers each left %d lines", len(before))
	}
	dir := testDir(t)
	start := time.Now()
	out, code := runLVSD(t, director, "import", "ipvsadm", "--out", filepath.Join(dir, "import"))
	took := time.Since(start)
	if code != 0 {
		t.Fatalf("lvsd import ipvsadm exited %d:\n%s", code, out)
	}
	if !strings.Contains(out, "0 not mapped") {
		t.Errorf("the import left something out:\n%s", out)
	}
	imported, _ := filepath.Glob(filepath.Join(dir, "import", "services.d", "*.yaml"))
	if len(imported) != 1000 {
		t.Fatalf("the import wrote %d service files, want 1000", len(imported))
	}
	services := map[string]string{}
	for _, f := range imported {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		services[strings.TrimSuffix(filepath.Base(f), ".yaml")] = string(b)
	}
	l := newDirector(t, director, services)
	if plan, code := runLVSD(t, director, "plan", "--config", filepath.Join(l.dir, "lvsd.yaml")); code != 0 || strings.Contains(plan, "-service") || strings.Contains(plan, "-destination") {
		t.Errorf("before lvsd runs, lvsd plan (exit %d) changes IPVS:\n%s", code, firstLines(plan, 20))
	}
	l.start()
	l.waitLog(0, 180*time.Second, "msg=reconciled")
	plan, code := runLVSD(t, director, "plan", "--config", filepath.Join(l.dir, "lvsd.yaml"))
	if code != 0 || !strings.Contains(plan, "no changes") {
		t.Errorf("lvsd plan (exit %d) after lvsd adopted the import:\n%s", code, firstLines(plan, 20))
	}
	after := normalTable(ipvsSave(t, director))
	if added, removed := lineDiff(strings.Join(before, "\n"), strings.Join(after, "\n")); len(added)+len(removed) > 0 {
		t.Errorf("lvsd changed the table: %d lines added (%q…), %d removed (%q…)", len(added), firstOf(added), len(removed), firstOf(removed))
	}
	t.Logf("1,000 services, 3,000 real servers: imported from the kernel in %v; lvsd adopted them unchanged", took.Round(time.Millisecond))
}

// ipvsTable is an ipvsadm -R text of n services with 3 real servers each,
// cycling through schedulers, flags, persistence, protocols, forwarding,
// weights and thresholds.
func ipvsTable(n int) string {
	scheds := []string{"-s rr", "-s wlc", "-s wrr", "-s sh", "-s lc", "-s mh -b flag-1", "-s mh -b flag-1,flag-2"}
	fwds := []string{"-g", "-m", "-i"}
	var b strings.Builder
	for i := range n {
		proto := "-t"
		if i%4 == 3 {
			proto = "-u"
		}
		svc := fmt.Sprintf("%s 10.200.%d.%d:%d", proto, i/200, i%200+1, 80+i%3)
		opts := scheds[i%len(scheds)]
		if i%5 == 0 {
			opts += " -p 300"
			if i%10 == 0 {
				opts += " -M 255.255.255.0"
			}
		}
		fmt.Fprintf(&b, "-A %s %s\n", svc, opts)
		fwd := fwds[i%len(fwds)]
		for j := range 3 {
			port := 80 + i%3
			if fwd == "-m" && i%2 == 0 {
				port = 8080
			}
			th := ""
			if j == 2 && i%6 == 0 {
				th = " -x 100 -y 50"
			}
			fmt.Fprintf(&b, "-a %s -r 10.201.%d.%d:%d %s -w %d%s\n", svc, i%250, j+1, port, fwd, (i+j)%4, th)
		}
	}
	return b.String()
}

func firstLines(s string, n int) string {
	lines := strings.SplitN(s, "\n", n+1)
	if len(lines) > n {
		lines[n] = "…"
	}
	return strings.Join(lines, "\n")
}

func firstOf(s []string) string {
	if len(s) == 0 {
		return ""
	}
	return s[0]
}
