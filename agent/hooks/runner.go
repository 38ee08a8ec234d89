package hooks

import (
	"context"
	"log/slog"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lvsd/lvsd/agent/program"
)

// Defaults and bounds of a hook's timeout, and the size of each hook's
// queue.
const (
	DefaultTimeout = 10 * time.Second
	MinTimeout     = 100 * time.Millisecond
	MaxTimeout     = 10 * time.Minute
	// QueueSize bounds the events waiting for one hook: a hook slower
	// than the events it is run for loses the oldest ones (counted).
	QueueSize = 64
)

// Config says which program each hook runs.
type Config struct {
	Node     string          // LVSD_NODE
	Programs map[Kind]string // absolute paths; a kind without one runs nothing
	Timeout  time.Duration   // a run is killed after it; 0: DefaultTimeout
	// LaxModes (strict_modes: false) runs a program whoever may write it
	// or its directories (program.CheckFile, program.CheckDirs).
	LaxModes bool
}

// Runner runs the hooks. Notify may be called from any goroutine and never
// blocks; Run runs the hooks until its context ends.
type Runner struct {
	node    string
	timeout time.Duration
	strict  bool // check each program's owner and mode before it runs
	log     *slog.Logger
	hooks   map[Kind]*hook
	seq     atomic.Uint64
	env     []string // what a hook inherits of lvsd's environment (program.Env); read only

	// ran, when set (tests), is called after every run.
	ran func(Kind, Result)
}

// hook is one hook's program, queue and counters. The queue is a buffered
// channel: Notify sends, and when it is full takes the oldest event out
// first; the hook's goroutine receives.
type hook struct {
	kind    Kind
	program string
	queue   chan queued
	dropped atomic.Uint64
	runs    [numResults]atomic.Uint64
}

type queued struct {
	ev  Event
	seq uint64
}

// New returns a runner for cfg; nil when cfg names no program (Notify on a
// nil Runner does nothing).
func New(cfg Config, log *slog.Logger) *Runner {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	r := &Runner{node: cfg.Node, timeout: cfg.Timeout, strict: !cfg.LaxModes, log: log, hooks: map[Kind]*hook{}, env: program.Env(os.Environ(), true)}
	if r.timeout == 0 {
		r.timeout = DefaultTimeout
	}
	for _, k := range Kinds {
		if p := cfg.Programs[k]; p != "" {
			r.hooks[k] = &hook{kind: k, program: p, queue: make(chan queued, QueueSize)}
		}
	}
	if len(r.hooks) == 0 {
		return nil
	}
	return r
}

// Notify queues ev for its hook and returns at once. A full queue loses its
// oldest event (lvsd_hook_dropped_total).
func (r *Runner) Notify(ev Event) {
	if r == nil {
		return
	}
	h := r.hooks[ev.Kind]
	if h == nil {
		return
	}
	if ev.Time.IsZero() {
		ev.Time = time.Now()
	}
	q := queued{ev, r.seq.Add(1)}
	for {
		select {
		case h.queue <- q:
			return
		default:
		}
		select {
		case old := <-h.queue:
			h.dropped.Add(1)
			r.log.Warn("hook queue full: dropping the oldest event", "hook", string(h.kind),
				"event_state", old.ev.State, "seq", old.seq)
		default: // the hook's goroutine took one meanwhile
		}
	}
}

// Run runs each hook's events, one process at a time per hook, until ctx
// ends; a run in progress then is killed, and queued events are dropped.
func (r *Runner) Run(ctx context.Context) {
	if r == nil {
		return
	}
	var wg sync.WaitGroup
	for _, h := range r.hooks {
		wg.Go(func() {
			for {
				select {
				case <-ctx.Done():
					return
				case q := <-h.queue:
					// Both cases may be ready; stopping wins.
					if ctx.Err() != nil {
						return
					}
					r.runOne(ctx, h, q)
				}
			}
		})
	}
	wg.Wait()
}

// runOne runs h's program for q and logs and counts the outcome.
func (r *Runner) runOne(ctx context.Context, h *hook, q queued) {
	start := time.Now()
	// A fresh slice per run: the hooks' goroutines share r.env, and
	// appending to it in place would let one hook's variables overwrite
	// another's.
	env := slices.Concat(r.env, q.ev.env(r.node, q.seq))
	res, out := run(ctx, h.program, r.strict, env, r.timeout)
	h.runs[res.Outcome].Add(1)
	attrs := []any{"hook", string(h.kind), "program", h.program, "event_state", q.ev.State, "seq", q.seq,
		"result", res.Outcome.String(), "duration", time.Since(start).String()}
	if q.ev.VIP.IsValid() {
		attrs = append(attrs, "vip", q.ev.VIP.String())
	}
	if q.ev.Backend != "" {
		attrs = append(attrs, "service", q.ev.Service, "backend", q.ev.Backend)
	}
	if out != "" {
		attrs = append(attrs, "output", out)
	}
	if res.Err != nil {
		r.log.Warn("hook failed", append(attrs, "err", res.Err)...)
	} else {
		r.log.Info("hook ran", attrs...)
	}
	if r.ran != nil {
		r.ran(h.kind, res)
	}
}
