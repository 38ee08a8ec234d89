package topo

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// FRR daemons run here by the tests: zebra (the kernel's routing table),
// bfdd and bgpd. Debian's frr package installs them (e2e/vm/run --setup
// does, without starting its service).
const frrLibexec = "/usr/lib/frr"

// FRRDaemons are the daemons StartFRR runs, in start order: bgpd reaches
// bfdd through zebra, so zebra comes first.
var FRRDaemons = []string{"zebra", "bfdd", "bgpd"}

// frrStartTimeout bounds the wait for a daemon's sockets: under TCG on a
// busy host bgpd once took 58 s to start.
const frrStartTimeout = 90 * time.Second

// FRR is one FRR instance (zebra, bfdd, bgpd) in a host's namespace, with
// its own folder for sockets, pid files and logs, as
// ../shared/notes/ecmp-lab.md runs it. Methods are safe for concurrent use.
type FRR struct {
	Host *Host
	// Dir holds the daemons' vty sockets, zserv.api, the configuration and
	// one log file per daemon (<daemon>.log).
	Dir string

	mu     sync.Mutex // guards all following fields
	config string
	procs  map[string]*frrProc
}

type frrProc struct {
	cmd  *exec.Cmd
	done chan struct{} // closed when the process exited
}

// StartFRR starts zebra, bfdd and bgpd in h's namespace and applies config
// (frr.conf syntax, through vtysh). It returns once the configuration is
// in; sessions come up later. Stop or Kill it; a test should register
// Stop with t.Cleanup.
func (h *Host) StartFRR(ctx context.Context, config string) (*FRR, error) {
	if _, err := os.Stat(filepath.Join(frrLibexec, "bgpd")); err != nil {
		return nil, fmt.Errorf("FRR is not installed (e2e/vm/run --setup installs the frr package): %w", err)
	}
	dir, err := os.MkdirTemp("", "frr-"+h.ID+"-")
	if err != nil {
		return nil, err
	}
	// The daemons drop to user frr and refuse to run as root ("root is
	// not part of vty group frrvty"), so the folder is theirs.
	if err := chownFRR(dir); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	f := &FRR{Host: h, Dir: dir, procs: map[string]*frrProc{}, config: config}
	if err := f.start(ctx); err != nil {
		return nil, errors.Join(err, f.Stop())
	}
	return f, nil
}

func chownFRR(path string) error {
	u, err := user.Lookup("frr")
	if err != nil {
		return fmt.Errorf("user frr (from the frr package): %w", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return os.Chown(path, uid, gid)
}

// start runs the daemons one after another and applies the configuration.
func (f *FRR) start(ctx context.Context) error {
	empty := filepath.Join(f.Dir, "empty.conf")
	if err := os.WriteFile(empty, nil, 0o644); err != nil {
		return err
	}
	for _, d := range FRRDaemons {
		if err := f.startDaemon(ctx, d, empty); err != nil {
			return err
		}
	}
	f.mu.Lock()
	config := f.config
	f.mu.Unlock()
	return f.Configure(ctx, config)
}

func (f *FRR) startDaemon(ctx context.Context, name, config string) error {
	args := []string{"-P", "0", "-f", config, "-i", filepath.Join(f.Dir, name+".pid"),
		"-z", filepath.Join(f.Dir, "zserv.api"), "--vty_socket", f.Dir,
		"--log", "file:" + filepath.Join(f.Dir, name+".log")}
	if name == "bfdd" {
		args = append(args, "--bfdctl", filepath.Join(f.Dir, "bfdd.sock"))
	}
	// Not -d: the test holds the process, so Kill is a signal and exits
	// are noticed. Not CommandContext: the daemons outlive the call.
	// At nice -10, as lvsd runs in a cluster: routers are machines of their
	// own, and in the one VM the directors' lvsd processes at -10 would
	// otherwise starve the routers' bfdd (seen: a director's rejoin burst
	// took every other director's 100 ms BFD session down at the router).
	cmd := exec.Command("nice", append([]string{"-n", "-10", filepath.Join(frrLibexec, name)}, args...)...)
	out, err := os.OpenFile(filepath.Join(f.Dir, name+".out"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer out.Close()
	cmd.Stdout, cmd.Stderr = out, out
	if err := f.Host.Start(cmd); err != nil {
		return fmt.Errorf("%v: starting %s: %w", f.Host, name, err)
	}
	p := &frrProc{cmd: cmd, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(p.done) }()
	f.mu.Lock()
	f.procs[name] = p
	f.mu.Unlock()

	ready := filepath.Join(f.Dir, name+".vty")
	if name == "zebra" {
		ready = filepath.Join(f.Dir, "zserv.api")
	}
	deadline := time.Now().Add(frrStartTimeout)
	for {
		if _, err := os.Stat(ready); err == nil {
			return nil
		}
		select {
		case <-p.done:
			return fmt.Errorf("%v: %s exited at start: %s", f.Host, name, f.tail(name))
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%v: %s made no %s in %v: %s", f.Host, name, ready, frrStartTimeout, f.tail(name))
		}
	}
}

// tail returns the end of a daemon's output and log, for error messages.
func (f *FRR) tail(name string) string {
	var b strings.Builder
	for _, file := range []string{name + ".out", name + ".log"} {
		data, _ := os.ReadFile(filepath.Join(f.Dir, file))
		if len(data) > 2000 {
			data = data[len(data)-2000:]
		}
		fmt.Fprintf(&b, "[%s] %s ", file, strings.TrimSpace(string(data)))
	}
	return b.String()
}

// Configure applies config (frr.conf syntax) with vtysh -f, which hands
// each part to its daemon; it adds to the running configuration.
func (f *FRR) Configure(ctx context.Context, config string) error {
	file, err := os.CreateTemp(f.Dir, "config-*.conf")
	if err != nil {
		return err
	}
	defer os.Remove(file.Name())
	if _, err := file.WriteString(config); err != nil {
		file.Close()
		return err
	}
	file.Close()
	if err := os.Chmod(file.Name(), 0o644); err != nil {
		return err
	}
	_, err = f.Host.Run(ctx, "vtysh", "--vty_socket", f.Dir, "-f", file.Name())
	return err
}

// Vtysh runs vtysh commands (each one as -c) and returns the output, e.g.
// Vtysh(ctx, "show bfd peers") or Vtysh(ctx, "configure", "router bgp
// 65000", "no network 10.0.0.50/32").
func (f *FRR) Vtysh(ctx context.Context, commands ...string) (string, error) {
	args := []string{"--vty_socket", f.Dir}
	for _, c := range commands {
		args = append(args, "-c", c)
	}
	return f.Host.Run(ctx, "vtysh", args...)
}

// Running reports whether the daemon's process is alive.
func (f *FRR) Running(name string) bool {
	f.mu.Lock()
	p := f.procs[name]
	f.mu.Unlock()
	if p == nil {
		return false
	}
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// PIDs returns the process ids of the running daemons by name.
func (f *FRR) PIDs() map[string]int {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := map[string]int{}
	for name, p := range f.procs {
		select {
		case <-p.done:
		default:
			out[name] = p.cmd.Process.Pid
		}
	}
	return out
}

// Kill sends SIGKILL to the named daemons (all when none are named) and
// waits until they are gone: a crash, nothing cleaned up.
func (f *FRR) Kill(names ...string) error { return f.signal(syscall.SIGKILL, names) }

// Stop ends all daemons with SIGTERM (SIGKILL after 10 s) and removes the
// instance's folder unless a daemon could not be stopped.
func (f *FRR) Stop() error {
	if err := f.signal(syscall.SIGTERM, nil); err != nil {
		return err
	}
	return os.RemoveAll(f.Dir)
}

// Restart stops the daemons (SIGTERM) and starts them again with the
// configuration StartFRR got (plus nothing applied later).
func (f *FRR) Restart(ctx context.Context) error {
	if err := f.signal(syscall.SIGTERM, nil); err != nil {
		return err
	}
	for _, d := range FRRDaemons {
		os.Remove(filepath.Join(f.Dir, d+".vty"))
	}
	os.Remove(filepath.Join(f.Dir, "zserv.api"))
	return f.start(ctx)
}

// signal sends sig to the named daemons (all when none) in reverse start
// order and waits for them to exit; after 10 s a SIGKILL follows.
func (f *FRR) signal(sig syscall.Signal, names []string) error {
	if len(names) == 0 {
		names = FRRDaemons
	}
	var errs []error
	for i := len(names) - 1; i >= 0; i-- {
		f.mu.Lock()
		p := f.procs[names[i]]
		f.mu.Unlock()
		if p == nil {
			continue
		}
		_ = p.cmd.Process.Signal(sig)
		select {
		case <-p.done:
		case <-time.After(10 * time.Second):
			_ = p.cmd.Process.Kill()
			select {
			case <-p.done:
			case <-time.After(5 * time.Second):
				errs = append(errs, fmt.Errorf("%v: %s (pid %d) does not exit", f.Host, names[i], p.cmd.Process.Pid))
			}
		}
	}
	return errors.Join(errs...)
}

// Log returns a daemon's log file ("bgpd", "bfdd", "zebra").
func (f *FRR) Log(name string) string {
	b, _ := os.ReadFile(filepath.Join(f.Dir, name+".log"))
	return string(b)
}
