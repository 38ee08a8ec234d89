package ecmplab

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/lvsd/lvsd/cluster/bfd"
	"github.com/lvsd/lvsd/cluster/bgp"
	"github.com/lvsd/lvsd/e2e/topo"
)

// helperEnv carries the speaker's configuration (JSON) to the helper.
const helperEnv = "LVSD_ECMPLAB_SPEAKER"

// SpeakerConfig is what a helper process runs: a bgp.Speaker and, when a
// peer wants it, a bfd.Server.
type SpeakerConfig struct {
	ASN      uint32
	RouterID netip.Addr
	NextHop6 netip.Addr `json:",omitempty"`
	Peers    []bgp.PeerConfig
	MD5Hint  time.Duration `json:",omitempty"`
	BFD      bfd.Timers    `json:",omitempty"`
	// ListenPort 179 lets the router connect too (see bgp.Config).
	ListenPort uint16 `json:",omitempty"`
}

type request struct {
	Op     string      `json:"op"` // routes, withdraw, status, close
	Routes []bgp.Route `json:"routes,omitempty"`
}

type response struct {
	Err    string      `json:"err,omitempty"`
	Status *bgp.Status `json:"status,omitempty"`
}

// RunHelperIfRequested runs the speaker and exits when this process was
// started as a Speaker; otherwise it returns at once.
func RunHelperIfRequested() {
	spec := os.Getenv(helperEnv)
	if spec == "" {
		return
	}
	if err := runHelper(spec, os.Stdin, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "ecmplab speaker:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

func runHelper(spec string, in io.Reader, out, logw io.Writer) error {
	var cfg SpeakerConfig
	if err := json.Unmarshal([]byte(spec), &cfg); err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(logw, &slog.HandlerOptions{Level: slog.LevelInfo}))
	ctx := context.Background()
	bcfg := bgp.Config{ASN: cfg.ASN, RouterID: cfg.RouterID, NextHop6: cfg.NextHop6, Peers: cfg.Peers,
		MD5Hint: cfg.MD5Hint, ListenPort: cfg.ListenPort, Log: log}
	var bfdSrv *bfd.Server
	for _, p := range cfg.Peers {
		if p.BFD && bfdSrv == nil {
			var err error
			if bfdSrv, err = bfd.Start(bfd.Config{Timers: cfg.BFD, Log: log.With("component", "bfd")}); err != nil {
				return err
			}
			bcfg.BFD = bfdSrv
		}
	}
	sp, err := bgp.Start(ctx, bcfg)
	if err != nil {
		return err
	}
	enc := json.NewEncoder(out)
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var req request
		if err := json.Unmarshal(sc.Bytes(), &req); err != nil {
			return err
		}
		var resp response
		var opErr error
		switch req.Op {
		case "routes":
			opErr = sp.SetRoutes(ctx, req.Routes)
		case "withdraw":
			wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			opErr = sp.Withdraw(wctx)
			cancel()
		case "status":
			st, err := sp.Status(ctx)
			resp.Status, opErr = &st, err
		case "close":
			cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			opErr = sp.Close(cctx)
			if bfdSrv != nil {
				opErr = errors.Join(opErr, bfdSrv.Close(cctx))
			}
			cancel()
		default:
			opErr = fmt.Errorf("unknown op %q", req.Op)
		}
		if opErr != nil {
			resp.Err = opErr.Error()
		}
		if err := enc.Encode(resp); err != nil {
			return err
		}
		if req.Op == "close" {
			return nil
		}
	}
	return sc.Err()
}

// Speaker is a speaker process in a director's namespace.
type Speaker struct {
	Host *topo.Host
	cmd  *exec.Cmd
	in   io.WriteCloser
	out  *json.Decoder
	log  *syncBuffer
	done chan struct{}

	mu sync.Mutex // one request at a time
}

// StartSpeaker re-executes this binary in h's namespace as a speaker.
func StartSpeaker(h *topo.Host, cfg SpeakerConfig) (*Speaker, error) {
	spec, err := json.Marshal(cfg)
	if err != nil {
		return nil, err
	}
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(self)
	cmd.Env = append(os.Environ(), helperEnv+"="+string(spec))
	s := &Speaker{Host: h, cmd: cmd, log: &syncBuffer{}, done: make(chan struct{})}
	cmd.Stderr = s.log
	if s.in, err = cmd.StdinPipe(); err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	s.out = json.NewDecoder(stdout)
	if err := h.Start(cmd); err != nil {
		return nil, fmt.Errorf("%v: starting the speaker: %w", h, err)
	}
	go func() { _ = cmd.Wait(); close(s.done) }()
	return s, nil
}

func (s *Speaker) call(ctx context.Context, req request) (response, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	b, _ := json.Marshal(req)
	if _, err := s.in.Write(append(b, '\n')); err != nil {
		return response{}, fmt.Errorf("%v speaker: %w (log: %s)", s.Host, err, s.Log())
	}
	type result struct {
		r   response
		err error
	}
	ch := make(chan result, 1)
	go func() {
		var r response
		err := s.out.Decode(&r)
		ch <- result{r, err}
	}()
	select {
	case res := <-ch:
		if res.err != nil {
			return response{}, fmt.Errorf("%v speaker: %w (log: %s)", s.Host, res.err, s.Log())
		}
		if res.r.Err != "" {
			return res.r, fmt.Errorf("%v speaker: %s", s.Host, res.r.Err)
		}
		return res.r, nil
	case <-ctx.Done():
		return response{}, ctx.Err()
	}
}

// SetRoutes calls bgp.Speaker.SetRoutes in the helper.
func (s *Speaker) SetRoutes(ctx context.Context, routes ...bgp.Route) error {
	_, err := s.call(ctx, request{Op: "routes", Routes: routes})
	return err
}

// Withdraw calls bgp.Speaker.Withdraw in the helper.
func (s *Speaker) Withdraw(ctx context.Context) error {
	_, err := s.call(ctx, request{Op: "withdraw"})
	return err
}

// Status returns the helper's bgp.Speaker.Status.
func (s *Speaker) Status(ctx context.Context) (bgp.Status, error) {
	r, err := s.call(ctx, request{Op: "status"})
	if err != nil {
		return bgp.Status{}, err
	}
	return *r.Status, nil
}

// Close stops the speaker gracefully (withdraw, Cease, BFD AdminDown) and
// waits for the process.
func (s *Speaker) Close(ctx context.Context) error {
	_, err := s.call(ctx, request{Op: "close"})
	s.in.Close()
	select {
	case <-s.done:
	case <-ctx.Done():
		s.Kill()
	}
	return err
}

// Kill sends SIGKILL (a crash) and waits for the process.
func (s *Speaker) Kill() {
	_ = s.cmd.Process.Signal(syscall.SIGKILL)
	<-s.done
}

// Exited reports whether the process ended.
func (s *Speaker) Exited() bool {
	select {
	case <-s.done:
		return true
	default:
		return false
	}
}

// Log returns what the speaker logged so far.
func (s *Speaker) Log() string { return s.log.String() }

// PID is the speaker's process id.
func (s *Speaker) PID() int { return s.cmd.Process.Pid }

// CPUTime is the user+system CPU time the process has used.
func (s *Speaker) CPUTime() (time.Duration, error) { return ProcessCPU(s.cmd.Process.Pid) }

// ProcessCPU reads a process's user+system CPU time from /proc.
func ProcessCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// Fields after the command name (which may hold spaces) start at ')'.
	rest := string(b[bytes.LastIndexByte(b, ')')+2:])
	f := strings.Fields(rest)
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f))
	}
	utime, err1 := strconv.ParseUint(f[11], 10, 64)
	stime, err2 := strconv.ParseUint(f[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, err
	}
	const clockTicks = 100 // USER_HZ on Linux
	return time.Duration(utime+stime) * time.Second / clockTicks, nil
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}
