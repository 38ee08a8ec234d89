package hooks

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// script writes an executable shell script with body into dir.
func script(t *testing.T, dir, name, body string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

// started runs r until the test ends and returns a channel that gets each
// run's kind and result.
func started(t *testing.T, r *Runner) <-chan ranResult {
	t.Helper()
	ran := make(chan ranResult, 1000)
	r.ran = func(k Kind, res Result) { ran <- ranResult{k, res} }
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { r.Run(ctx) })
	t.Cleanup(func() { cancel(); wg.Wait() })
	return ran
}

type ranResult struct {
	kind Kind
	res  Result
}

// await waits for n runs and returns them.
func await(t *testing.T, ran <-chan ranResult, n int) []ranResult {
	t.Helper()
	var out []ranResult
	for len(out) < n {
		select {
		case r := <-ran:
			out = append(out, r)
		case <-time.After(time.Minute): // a liveness bound, not a timing assertion
			t.Fatalf("%d runs of %d after a minute", len(out), n)
		}
	}
	return out
}

func TestHookEnvironment(t *testing.T) {
	at := time.Date(2026, 12, 1, 23, 0, 0, 5, time.UTC)
	for _, tc := range []struct {
		name string
		ev   Event
		want []string
	}{
		{"taken", Event{Kind: Ownership, State: StateTaken, VIP: netip.MustParseAddr("203.0.113.10"), Time: at},
			[]string{"LVSD_EVENT=ownership", "LVSD_NODE=d1", "LVSD_SEQ=1", "LVSD_STATE=taken",
				"LVSD_TIME=2026-12-01T23:00:00.000000005Z", "LVSD_VIP=203.0.113.10"}},
		{"released v6", Event{Kind: Ownership, State: StateReleased, VIP: netip.MustParseAddr("2001:db8::10"), Time: at},
			[]string{"LVSD_EVENT=ownership", "LVSD_NODE=d1", "LVSD_SEQ=1", "LVSD_STATE=released",
				"LVSD_TIME=2026-12-01T23:00:00.000000005Z", "LVSD_VIP=2001:db8::10"}},
		{"unhealthy", Event{Kind: Health, State: StateUnhealthy, Service: "web", Backend: "10.0.0.11:80", Time: at},
			[]string{"LVSD_BACKEND=10.0.0.11:80", "LVSD_EVENT=health", "LVSD_NODE=d1", "LVSD_SEQ=1",
				"LVSD_SERVICE=web", "LVSD_STATE=unhealthy", "LVSD_TIME=2026-12-01T23:00:00.000000005Z"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			out := filepath.Join(dir, "env")
			prog := script(t, dir, "hook", "env | grep ^LVSD_ | sort > "+out+"\necho ran; echo oops >&2")
			r := New(Config{Node: "d1", Programs: map[Kind]string{tc.ev.Kind: prog}, LaxModes: true}, nil)
			ran := started(t, r)
			r.Notify(tc.ev)
			if got := await(t, ran, 1)[0]; got.res.Outcome != OK {
				t.Fatalf("run: %v %v", got.res.Outcome, got.res.Err)
			}
			data, err := os.ReadFile(out)
			if err != nil {
				t.Fatal(err)
			}
			got := strings.Fields(string(data))
			if !slices.Equal(got, tc.want) {
				t.Errorf("environment\n got %q\nwant %q", got, tc.want)
			}
		})
	}
}

// TestHookSeesEachEventOnceInOrder: each event runs the hook of its kind
// once, in the order reported; a kind without a program runs nothing.
func TestHookSeesEachEventOnceInOrder(t *testing.T) {
	dir := t.TempDir()
	log := filepath.Join(dir, "log")
	prog := script(t, dir, "hook", `echo "$LVSD_EVENT $LVSD_STATE $LVSD_VIP$LVSD_BACKEND" >> `+log)
	r := New(Config{Node: "d1", Programs: map[Kind]string{Ownership: prog}, LaxModes: true}, nil)
	ran := started(t, r)
	var want []string
	for i := range 20 {
		vip := netip.AddrFrom4([4]byte{203, 0, 113, byte(i)})
		state := []string{StateTaken, StateReleased}[i%2]
		r.Notify(Event{Kind: Ownership, State: state, VIP: vip})
		r.Notify(Event{Kind: Health, State: StateHealthy, Backend: "10.0.0.1:80"}) // no health hook
		want = append(want, "ownership "+state+" "+vip.String())
	}
	await(t, ran, 20)
	data, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Split(strings.TrimSpace(string(data)), "\n")
	if !slices.Equal(got, want) {
		t.Errorf("runs\n got %q\nwant %q", got, want)
	}
	if s := r.Stats(Ownership); s.Runs[OK] != 20 || s.Dropped != 0 {
		t.Errorf("stats %+v, want 20 ok, none dropped", s)
	}
}

// TestHookTimeoutKillsProcessGroup: a hook that outlives its timeout is
// killed with its children, counted as a timeout, and the next event runs.
func TestHookTimeoutKillsProcessGroup(t *testing.T) {
	dir := t.TempDir()
	pids := filepath.Join(dir, "pids")
	done := filepath.Join(dir, "done")
	prog := script(t, dir, "hook", fmt.Sprintf(`if [ "$LVSD_STATE" = taken ]; then
  sleep 600 & echo $! > %s
  wait
fi
echo "$LVSD_STATE" > %s`, pids, done))
	r := New(Config{Node: "d1", Programs: map[Kind]string{Ownership: prog}, LaxModes: true, Timeout: 200 * time.Millisecond}, nil)
	ran := started(t, r)
	vip := netip.MustParseAddr("203.0.113.10")
	r.Notify(Event{Kind: Ownership, State: StateTaken, VIP: vip})
	r.Notify(Event{Kind: Ownership, State: StateReleased, VIP: vip})
	got := await(t, ran, 2)
	if got[0].res.Outcome != Timeout || got[1].res.Outcome != OK {
		t.Fatalf("outcomes %v, %v; want timeout, ok", got[0].res.Outcome, got[1].res.Outcome)
	}
	if data, _ := os.ReadFile(done); strings.TrimSpace(string(data)) != StateReleased {
		t.Errorf("the run after the timeout wrote %q", data)
	}
	data, err := os.ReadFile(pids)
	if err != nil {
		t.Fatal(err)
	}
	child, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil {
		t.Fatal(err)
	}
	// SIGKILL went to the group before the run returned; the child dies
	// (or is a zombie waiting for its reaper) as soon as it is scheduled.
	for deadline := time.Now().Add(time.Minute); alive(child); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the hook's child %d is still running a minute after the timeout", child)
		}
	}
	if s := r.Stats(Ownership); s.Runs[Timeout] != 1 || s.Runs[OK] != 1 {
		t.Errorf("stats %+v", s)
	}
}

// alive reports whether pid runs (not gone, not a zombie).
func alive(pid int) bool {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	_, rest, _ := strings.Cut(string(data), ") ")
	return !strings.HasPrefix(rest, "Z") && !strings.HasPrefix(rest, "X")
}

// TestHangingHookNeitherBlocksNorLoses: while a hook hangs, Notify returns
// at once; the queue keeps the newest QueueSize events and counts the
// others as dropped; the other hook kind runs meanwhile.
func TestHangingHookNeitherBlocksNorLoses(t *testing.T) {
	dir := t.TempDir()
	gate := filepath.Join(dir, "gate")
	log := filepath.Join(dir, "log")
	// The first run waits until the test opens the gate.
	hang := script(t, dir, "hang", fmt.Sprintf(`while [ "$LVSD_SEQ" = 1 ] && [ ! -e %s ]; do sleep 0.05; done
echo "$LVSD_SEQ" >> %s`, gate, log))
	other := script(t, dir, "other", "exit 3")
	r := New(Config{Node: "d1", Programs: map[Kind]string{Ownership: hang, Health: other}, LaxModes: true, Timeout: time.Hour}, nil)
	ran := started(t, r)
	vip := netip.MustParseAddr("203.0.113.10")
	r.Notify(Event{Kind: Ownership, State: StateTaken, VIP: vip}) // seq 1: hangs
	// Wait until the hanging run took seq 1 out of the queue, so that
	// what the queue keeps is known.
	for len(r.hooks[Ownership].queue) > 0 {
		time.Sleep(time.Millisecond)
	}
	extra := 10
	for range QueueSize + extra {
		r.Notify(Event{Kind: Ownership, State: StateReleased, VIP: vip})
	}
	r.Notify(Event{Kind: Health, State: StateUnhealthy, Service: "web", Backend: "10.0.0.11:80"})
	if got := await(t, ran, 1)[0]; got.kind != Health || got.res.Outcome != Failed {
		t.Fatalf("first run %v %v, want the health hook, failed", got.kind, got.res.Outcome)
	}
	if err := os.WriteFile(gate, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	await(t, ran, 1+QueueSize)
	data, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Fields(string(data))
	want := []string{"1"}
	for seq := 2 + extra; seq < 2+extra+QueueSize; seq++ {
		want = append(want, strconv.Itoa(seq))
	}
	if !slices.Equal(got, want) {
		t.Errorf("runs by seq\n got %v\nwant %v", got, want)
	}
	s := r.Stats(Ownership)
	if s.Dropped != uint64(extra) || s.Runs[OK] != uint64(1+QueueSize) {
		t.Errorf("stats %+v, want %d dropped, %d ok", s, extra, 1+QueueSize)
	}
	if h := r.Stats(Health); h.Runs[Failed] != 1 {
		t.Errorf("health stats %+v", h)
	}
}

func TestNoProgramsNoRunner(t *testing.T) {
	r := New(Config{Node: "d1"}, nil)
	if r != nil {
		t.Fatal("a runner without programs")
	}
	r.Notify(Event{Kind: Ownership}) // a nil runner takes events and does nothing
	r.Run(context.Background())
}

// TestStopKillsRunAndDropsQueue: when lvsd stops, the run in progress is
// killed and reported as such (not as a timeout), and nothing queued
// starts.
func TestStopKillsRunAndDropsQueue(t *testing.T) {
	dir := t.TempDir()
	log := filepath.Join(dir, "log")
	prog := script(t, dir, "hang", fmt.Sprintf(`echo "$LVSD_SEQ" >> %s; sleep 600`, log))
	r := New(Config{Node: "d1", Programs: map[Kind]string{Ownership: prog}, LaxModes: true, Timeout: time.Hour}, nil)
	ran := make(chan ranResult, 100)
	r.ran = func(k Kind, res Result) { ran <- ranResult{k, res} }
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { r.Run(ctx); close(done) }()
	vip := netip.MustParseAddr("203.0.113.10")
	for range 5 {
		r.Notify(Event{Kind: Ownership, State: StateTaken, VIP: vip})
	}
	for { // until the first run has started
		if b, _ := os.ReadFile(log); len(b) > 0 {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	<-done
	got := await(t, ran, 1)[0]
	if got.res.Outcome != Failed || !strings.Contains(got.res.Err.Error(), "stopping") {
		t.Errorf("the run stopped with lvsd: %v %v, want failed, stopping", got.res.Outcome, got.res.Err)
	}
	if n := len(ran); n != 0 {
		t.Errorf("%d more runs after stop", n)
	}
	if b, _ := os.ReadFile(log); string(b) != "1\n" {
		t.Errorf("runs by seq %q, want only 1", b)
	}
}

// TestConcurrentHooksSeeOnlyTheirOwnEvent runs the two hooks side by side
// many times: each process must see exactly its own event's variables,
// even when the inherited environment has room to grow in place (as
// program.Env's result may), which the two hooks' goroutines share.
func TestConcurrentHooksSeeOnlyTheirOwnEvent(t *testing.T) {
	const runs = 40
	dir := t.TempDir()
	progs := map[Kind]string{}
	for _, k := range Kinds {
		if err := os.Mkdir(filepath.Join(dir, string(k)), 0o755); err != nil {
			t.Fatal(err)
		}
		// $$ names the file: the variables themselves are what is checked.
		progs[k] = script(t, dir, "hook-"+string(k), "env | grep ^LVSD_ | sort > "+filepath.Join(dir, string(k))+"/$$")
	}
	r := New(Config{Node: "d1", Programs: progs, LaxModes: true}, nil)
	r.env = append(make([]string, 0, 64), r.env...)
	ran := started(t, r)
	at := time.Date(2026, 12, 1, 23, 0, 0, 0, time.UTC)
	want := map[Kind]map[string]bool{Ownership: {}, Health: {}}
	for i := range runs {
		own := Event{Kind: Ownership, State: StateTaken, VIP: netip.AddrFrom4([4]byte{203, 0, 113, byte(i)}), Time: at}
		health := Event{Kind: Health, State: StateUnhealthy, Service: "web" + strconv.Itoa(i), Backend: "10.0.0.11:80", Time: at}
		for j, ev := range []Event{own, health} {
			r.Notify(ev)
			env := ev.env("d1", uint64(2*i+j+1))
			slices.Sort(env)
			want[ev.Kind][strings.Join(env, " ")] = true
		}
		await(t, ran, 2) // the queues never fill: no event is dropped
	}
	for _, k := range Kinds {
		files, err := os.ReadDir(filepath.Join(dir, string(k)))
		if err != nil {
			t.Fatal(err)
		}
		if len(files) != runs {
			t.Errorf("%s hook: %d processes wrote their environment, want %d", k, len(files), runs)
		}
		for _, f := range files {
			data, err := os.ReadFile(filepath.Join(dir, string(k), f.Name()))
			if err != nil {
				t.Fatal(err)
			}
			got := strings.Join(strings.Fields(string(data)), " ")
			if !want[k][got] {
				t.Errorf("%s hook saw variables of no %s event: %s", k, k, got)
			}
			delete(want[k], got)
		}
	}
}
