package arp

import (
	"context"
	"errors"
	"net/netip"
	"reflect"
	"runtime"
	"strings"
	"testing"
	"time"
)

var (
	vipA = netip.MustParsePrefix("10.0.0.50/32")
	vipB = netip.MustParsePrefix("fd00::50/128")
)

func newLeased(t *testing.T) (*Leased, *FakeExpiring, *FakeAnnouncer) {
	t.Helper()
	k := NewFakeExpiring("eth0")
	ann := &FakeAnnouncer{}
	return &Leased{Addrs: k, Announcer: ann, Lifetime: 10 * time.Second, Burst: []time.Duration{0, time.Second}}, k, ann
}

// runLeased runs l until the test ends.
func runLeased(t *testing.T, l *Leased) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); l.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
}

func TestLeasedAddAndAnnounce(t *testing.T) {
	l, k, ann := newLeased(t)
	runLeased(t, l)
	ctx := context.Background()
	for _, p := range []netip.Prefix{vipA, vipB} {
		if err := l.Add(ctx, "eth0", p); err != nil {
			t.Fatal(err)
		}
	}
	if ops := k.Ops(); !reflect.DeepEqual(ops, []string{"add-address eth0 10.0.0.50/32 valid 10s", "add-address eth0 fd00::50/128 valid 10s"}) {
		t.Errorf("ops %q", ops)
	}
	if sent := ann.Sent(); len(sent) != 0 {
		t.Errorf("an add announced %q: announcing is an op of its own", sent)
	}
	for _, p := range []netip.Prefix{vipA, vipB} {
		if err := l.Announce(ctx, "eth0", p.Addr()); err != nil {
			t.Fatal(err)
		}
	}
	if sent := ann.Sent(); !reflect.DeepEqual(sent, []string{"announce eth0 10.0.0.50", "announce eth0 fd00::50"}) {
		t.Errorf("first announcements %q, want one each at once", sent)
	}
	if err := l.Delete(ctx, "eth0", vipA); err != nil {
		t.Fatal(err)
	}
	// The burst goes on for the address still leased only.
	var sent []string
	for deadline := time.Now().Add(10 * time.Second); len(sent) == 0 && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
		sent = ann.Sent()
	}
	time.Sleep(200 * time.Millisecond) // a repeat of the deleted address would come with it
	sent = append(sent, ann.Sent()...)
	if !reflect.DeepEqual(sent, []string{"announce eth0 fd00::50"}) {
		t.Errorf("repeats %q, want only fd00::50's", sent)
	}
	if err := l.Delete(ctx, "eth0", vipA); !errors.Is(err, ErrNotFound) {
		t.Errorf("deleting a missing address: %v, want ErrNotFound", err)
	}
	// An address that is not leased is not announced.
	if err := l.Announce(ctx, "eth0", vipA.Addr()); err != nil || len(ann.Sent()) != 0 {
		t.Errorf("announcing a deleted address: err %v", err)
	}
}

// Renewal keeps a leased address alive past its lifetime; an address
// deleted meanwhile is not brought back; without Keep nothing is renewed.
func TestLeasedRenew(t *testing.T) {
	l, k, _ := newLeased(t)
	now := time.Unix(1000, 0)
	k.Now = func() time.Time { return now }
	ctx := context.Background()
	_ = l.Add(ctx, "eth0", vipA)
	_ = l.Add(ctx, "eth0", vipB)
	_ = l.Delete(ctx, "eth0", vipB)
	now = now.Add(8 * time.Second)
	l.renew(ctx)
	k.Expire(now.Add(5 * time.Second)) // 13 s after the add, 5 s after the renewal
	if got, _ := k.List(ctx, "eth0"); !reflect.DeepEqual(got, []netip.Prefix{vipA}) {
		t.Errorf("after renewal: %v, want only %v", got, vipA)
	}
	keep := false
	l.Keep = func() bool { return keep }
	now = now.Add(8 * time.Second)
	l.renew(ctx)
	k.Expire(now.Add(3 * time.Second))
	if got, _ := k.List(ctx, "eth0"); len(got) != 0 {
		t.Errorf("renewed although Keep said no: %v", got)
	}
}

// The bursts run on Run's goroutines: one asked for before Run starts
// with it, and once ctx ends and Run returned none is left.
func TestLeasedRunJoinsBursts(t *testing.T) {
	k := NewFakeExpiring("eth0")
	ann := &FakeAnnouncer{}
	l := &Leased{Addrs: k, Announcer: ann, Lifetime: 10 * time.Second, Burst: []time.Duration{0, 50 * time.Millisecond, time.Hour}}
	ctx := context.Background()
	for _, p := range []netip.Prefix{vipA, vipB} {
		if err := l.Add(ctx, "eth0", p); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Announce(ctx, "eth0", vipA.Addr()); err != nil { // before Run: its repeats wait for it
		t.Fatal(err)
	}
	if n := leasedGoroutines("burst"); n != 0 {
		t.Errorf("%d bursts before Run, want none: a burst started on its own", n)
	}
	ann.Sent() // the first announcement, sent at once
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); l.Run(runCtx) }()
	if err := l.Announce(ctx, "eth0", vipB.Addr()); err != nil {
		t.Fatal(err)
	}
	l.Reannounce(vipA.Addr())
	// Three bursts, each waiting for its repeat an hour in.
	for deadline := time.Now().Add(10 * time.Second); leasedGoroutines("burst") != 3; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d bursts running, want vipA's asked for before Run, vipB's and the reannouncement's", leasedGoroutines("burst"))
		}
	}
	if n := leasedGoroutines("Run"); n != 1 {
		t.Errorf("%d goroutines in Run, want 1", n)
	}
	cancel()
	<-done
	if n := leasedGoroutines(""); n != 0 {
		t.Errorf("%d goroutines of Leased left after Run returned, want none", n)
	}
	l.Reannounce(vipA.Addr()) // after Run: nothing starts
	if n := leasedGoroutines(""); n != 0 {
		t.Errorf("%d goroutines of Leased after a Reannounce once Run returned, want none", n)
	}
}

// leasedGoroutines counts the goroutines in the method fn of Leased (""
// any method), by their stacks.
func leasedGoroutines(fn string) int {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	n := 0
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "arp.(*Leased)."+fn) {
			n++
		}
	}
	return n
}

// A restart hold makes the leased addresses outlive the process by the
// hold, not by Lifetime; the next process adopts and renews them without
// adding them again.
func TestLeasedRestartHold(t *testing.T) {
	l, k, _ := newLeased(t)
	ctx := context.Background()
	if err := l.Add(ctx, "eth0", vipA); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		until time.Time
		want  string
	}{
		{"a hold past Lifetime", time.Now().Add(30 * time.Second), "add-address eth0 10.0.0.50/32 valid 30s"},
		{"a hold shorter than Lifetime", time.Now().Add(3 * time.Second), "add-address eth0 10.0.0.50/32 valid 10s"},
		{"the hold ended", time.Time{}, "add-address eth0 10.0.0.50/32 valid 10s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := l.HoldUntil(ctx, tc.until); err != nil {
				t.Fatal(err)
			}
			if ops := k.Ops(); ops[len(ops)-1] != tc.want {
				t.Errorf("last op %q, want %q", ops[len(ops)-1], tc.want)
			}
		})
	}

	next, k2, _ := newLeased(t)
	next.Addrs = k
	next.Adopt("eth0", vipA)
	if ops := k2.Ops(); len(ops) != 0 {
		t.Errorf("adopting changed the kernel: %q", ops)
	}
	before := len(k.Ops())
	next.renew(ctx)
	if ops := k.Ops()[before:]; !reflect.DeepEqual(ops, []string{"add-address eth0 10.0.0.50/32 valid 10s"}) {
		t.Errorf("renewing an adopted address: %q", ops)
	}
}
