package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/lvsd/lvsd/e2e/topo"
)

// lvsd is one lvsd process the bench runs, and its log lines.
type lvsd struct {
	cmd    *exec.Cmd
	lines  chan string
	socket string // the control socket
	// last keeps lvsd's last log lines and exited how it ended, for the
	// error when it exits early.
	mu     sync.Mutex
	last   []string
	exited error
}

// startLVSD starts lvsd and returns once its first reconcile is logged, with
// the time from exec to that line.
func startLVSD(h *topo.Host, bin, cfg string, env ...string) (*lvsd, time.Duration, error) {
	cmd := exec.Command(bin, "run", "--config", cfg)
	// As packaging/lvsd.service runs it: no transparent huge pages for its
	// heap (the VM's kernel has THP "always").
	cmd.Env = append(append(os.Environ(), "GODEBUG=disablethp=1"), env...)
	pr, pw := io.Pipe()
	cmd.Stderr, cmd.Stdout = pw, pw
	l := &lvsd{cmd: cmd, lines: make(chan string, 1<<16)} // room for bursts: a full one would block the pipe and stall lvsd
	go func() {
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			l.mu.Lock()
			l.last = append(l.last, sc.Text())
			if len(l.last) > 20 {
				l.last = l.last[1:]
			}
			l.mu.Unlock()
			l.lines <- sc.Text()
		}
		close(l.lines)
	}()
	start := time.Now()
	if err := h.Start(cmd); err != nil {
		return nil, 0, err
	}
	go func() {
		err := cmd.Wait()
		l.mu.Lock()
		l.exited = err
		l.mu.Unlock()
		pw.Close()
	}()
	if _, _, err := l.waitReconciled(30 * time.Minute); err != nil { // three directors started together at 10,000 services take long
		l.stop()
		return nil, 0, err
	}
	return l, time.Since(start), nil
}

// waitReconciled returns the applied-op lines logged before the next
// "reconciled" line, and that line.
func (l *lvsd) waitReconciled(timeout time.Duration) (applied []string, reconciled string, err error) {
	deadline := time.After(timeout)
	for {
		line, err := l.nextLine(deadline, "reconciling")
		if err != nil {
			return nil, "", err
		}
		if strings.Contains(line, "level=ERROR") {
			return nil, "", fmt.Errorf("lvsd: %s", line)
		}
		if strings.Contains(line, "msg=applied") {
			applied = append(applied, line)
		}
		if strings.Contains(line, "msg=reconciled") || strings.Contains(line, "msg=starting") {
			fmt.Printf("    lvsd: %s\n", line[strings.Index(line, "msg="):])
		}
		if strings.Contains(line, "msg=reconciled") {
			return applied, line, nil
		}
	}
}

// waitFor returns the next log line that contains every one of texts.
func (l *lvsd) waitFor(timeout time.Duration, texts ...string) (string, error) {
	deadline := time.After(timeout)
	for {
		line, err := l.nextLine(deadline, fmt.Sprintf("logging %q", texts))
		if err != nil {
			return "", err
		}
		if !slices.ContainsFunc(texts, func(t string) bool { return !strings.Contains(line, t) }) {
			fmt.Printf("    lvsd: %s\n", line[strings.Index(line, "msg="):])
			return line, nil
		}
	}
}

// loggedAt is the time= of a log line.
func loggedAt(line string) (time.Time, bool) {
	rest, ok := strings.CutPrefix(line, "time=")
	if !ok {
		return time.Time{}, false
	}
	stamp, _, _ := strings.Cut(rest, " ")
	at, err := time.Parse(time.RFC3339Nano, stamp)
	return at, err == nil
}

// nextLine returns lvsd's next log line, or why there is none: it exited,
// or deadline came first, while the caller was waiting for what.
func (l *lvsd) nextLine(deadline <-chan time.Time, what string) (string, error) {
	select {
	case line, ok := <-l.lines:
		if !ok {
			l.mu.Lock()
			defer l.mu.Unlock()
			return "", fmt.Errorf("lvsd exited (%v) before %s; its last lines:\n%s", l.exited, what, strings.Join(l.last, "\n"))
		}
		return line, nil
	case <-deadline:
		return "", fmt.Errorf("lvsd timed out %s", what)
	}
}

func (l *lvsd) stop() {
	l.cmd.Process.Signal(syscall.SIGTERM)
	for range l.lines { // closed once the process has exited (and written its profile)
	}
}
