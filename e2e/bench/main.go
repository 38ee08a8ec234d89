// Command lvsd-bench measures lvsd against ipvsadm -R inside the test VM
// (`make bench`): a cold apply of many services with many real servers each,
// then one weight change. Both tools program the same set in the same
// network namespace in one run, so the ratio is what counts; absolute times
// under emulation are noise.
package main

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/lvsd/lvsd/e2e/topo"
)

const vip = "10.0.0.50"

func main() {
	lvsdBin := flag.String("lvsd", "bin/lvsd", "the lvsd binary")
	services := flag.Int("services", 1000, "services (one port each)")
	backends := flag.Int("backends", 10, "real servers per service")
	rounds := flag.Int("rounds", 2, "measurements of each tool")
	flag.Parse()
	if err := bench(*lvsdBin, *services, *backends, *rounds); err != nil {
		fmt.Fprintln(os.Stderr, "bench failed:", err)
		os.Exit(1)
	}
}

func bench(lvsdBin string, nServices, nBackends, rounds int) error {
	kernel, _ := exec.Command("uname", "-r").Output()
	fmt.Printf("lvsd benchmark: %d services × %d real servers (mh, DR), kernel %s", nServices, nBackends, kernel)
	tp, err := topo.Build(topo.WithRealServers(0), topo.WithClientSources(0))
	if err != nil {
		return err
	}
	defer tp.Close()
	director := tp.Director(1)

	dir, err := os.MkdirTemp("", "lvsd-bench")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	servicesFile := filepath.Join(dir, "services.d", "bench.yaml")
	os.MkdirAll(filepath.Dir(servicesFile), 0o755)
	yaml, restore := generate(nServices, nBackends, 1)
	if err := os.WriteFile(servicesFile, []byte(yaml), 0o644); err != nil {
		return err
	}
	agentFile := filepath.Join(dir, "lvsd.yaml")
	os.WriteFile(agentFile, []byte(fmt.Sprintf("node: bench\ninterface: %s\nservices_dir: services.d\nstate_dir: state\n", director.Link)), 0o644)

	var lvsdTimes, refTimes []time.Duration
	for r := 0; r < rounds; r++ {
		if err := reset(director, dir); err != nil {
			return err
		}
		l, elapsed, err := startLVSD(director, lvsdBin, agentFile)
		if err != nil {
			return err
		}
		lvsdTimes = append(lvsdTimes, elapsed)
		last := r == rounds-1
		if last {
			if err := weightChange(l, servicesFile, nServices, nBackends); err != nil {
				l.stop()
				return err
			}
		}
		l.stop()

		if err := reset(director, dir); err != nil {
			return err
		}
		start := time.Now()
		cmd := exec.Command("ipvsadm", "-R")
		cmd.Stdin = strings.NewReader(restore)
		if out, err := runIn(director, cmd); err != nil {
			return fmt.Errorf("ipvsadm -R: %v: %s", err, out)
		}
		refTimes = append(refTimes, time.Since(start))
		fmt.Printf("round %d: lvsd cold apply %.2fs, ipvsadm -R %.2fs\n", r+1, lvsdTimes[r].Seconds(), refTimes[r].Seconds())
	}
	lm, rm := median(lvsdTimes), median(refTimes)
	fmt.Printf("\ncold apply, median of %d: lvsd %.2fs, ipvsadm -R %.2fs, ratio lvsd/ipvsadm = %.2f\n",
		rounds, lm.Seconds(), rm.Seconds(), lm.Seconds()/rm.Seconds())
	return reset(director, dir)
}

// generate returns the service file and the equivalent ipvsadm -R input, in
// the order lvsd adds destinations (sorted by address).
func generate(nServices, nBackends, weight int) (string, string) {
	var y, r strings.Builder
	for s := 0; s < nServices; s++ {
		port := 1000 + s
		fmt.Fprintf(&y, "---\nservice: svc%d\nvip: %s\nports: [%d]\nbackends:\n", s, vip, port)
		fmt.Fprintf(&r, "-A -t %s:%d -s mh -b mh-fallback,mh-port\n", vip, port)
		for b := 1; b <= nBackends; b++ {
			w := weight
			if s == 0 && b == 1 {
				w = 1 // the weight-change step edits this one
			}
			fmt.Fprintf(&y, "  - {address: 10.3.%d.%d, weight: %d}\n", b/250, b%250+1, w)
			fmt.Fprintf(&r, "-a -t %s:%d -r 10.3.%d.%d:%d -g -w %d\n", vip, port, b/250, b%250+1, port, w)
		}
	}
	return y.String(), r.String()
}

// reset empties the bench namespace's IPVS table and lvsd's state, so each
// measurement starts cold. Only the benchmark's own namespace is flushed.
func reset(director *topo.Host, dir string) error {
	os.RemoveAll(filepath.Join(dir, "state"))
	if out, err := runIn(director, exec.Command("ipvsadm", "-C")); err != nil {
		return fmt.Errorf("ipvsadm -C: %v: %s", err, out)
	}
	return nil
}

func runIn(h *topo.Host, cmd *exec.Cmd) (string, error) {
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := h.Start(cmd); err != nil {
		return "", err
	}
	err := cmd.Wait()
	return out.String(), err
}

type lvsd struct {
	cmd   *exec.Cmd
	lines chan string
}

// startLVSD starts lvsd and returns once its first reconcile is logged, with
// the time from exec to that line.
func startLVSD(h *topo.Host, bin, cfg string) (*lvsd, time.Duration, error) {
	cmd := exec.Command(bin, "run", "--config", cfg)
	pr, pw := io.Pipe()
	cmd.Stderr, cmd.Stdout = pw, pw
	l := &lvsd{cmd: cmd, lines: make(chan string, 1024)}
	go func() {
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			l.lines <- sc.Text()
		}
		close(l.lines)
	}()
	start := time.Now()
	if err := h.Start(cmd); err != nil {
		return nil, 0, err
	}
	go func() { cmd.Wait(); pw.Close() }()
	if _, err := l.waitReconciled(5 * time.Minute); err != nil {
		l.stop()
		return nil, 0, err
	}
	return l, time.Since(start), nil
}

// waitReconciled returns the applied-op lines logged before the next
// "reconciled" line.
func (l *lvsd) waitReconciled(timeout time.Duration) ([]string, error) {
	var applied []string
	deadline := time.After(timeout)
	for {
		select {
		case line, ok := <-l.lines:
			if !ok {
				return nil, fmt.Errorf("lvsd exited before reconciling")
			}
			if strings.Contains(line, "level=ERROR") {
				return nil, fmt.Errorf("lvsd: %s", line)
			}
			if strings.Contains(line, "msg=applied") {
				applied = append(applied, line)
			}
			if strings.Contains(line, "msg=reconciled") || strings.Contains(line, "msg=starting") {
				fmt.Printf("    lvsd: %s\n", line[strings.Index(line, "msg="):])
			}
			if strings.Contains(line, "msg=reconciled") {
				return applied, nil
			}
		case <-deadline:
			return nil, fmt.Errorf("no reconcile within %v", timeout)
		}
	}
}

func (l *lvsd) stop() {
	l.cmd.Process.Signal(syscall.SIGTERM)
	for range l.lines {
	}
}

// weightChange edits one backend's weight, reloads and reports the time and
// the number of kernel operations it took.
func weightChange(l *lvsd, servicesFile string, nServices, nBackends int) error {
	yaml, _ := generate(nServices, nBackends, 1)
	edited := strings.Replace(yaml, "{address: 10.3.0.2, weight: 1}", "{address: 10.3.0.2, weight: 5}", 1)
	if err := os.WriteFile(servicesFile, []byte(edited), 0o644); err != nil {
		return err
	}
	start := time.Now()
	l.cmd.Process.Signal(syscall.SIGHUP)
	applied, err := l.waitReconciled(2 * time.Minute)
	if err != nil {
		return err
	}
	fmt.Printf("weight change: reload + reconcile in %.2fs, %d kernel operation(s):\n", time.Since(start).Seconds(), len(applied))
	for _, a := range applied {
		fmt.Printf("  %s\n", a[strings.Index(a, "msg="):])
	}
	os.WriteFile(servicesFile, []byte(yaml), 0o644)
	return nil
}

func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}
