package arp

import (
	"context"
	"errors"
	"net/netip"
	"reflect"
	"slices"
	"sync"
	"testing"
	"time"
)

var (
	vipA = netip.MustParsePrefix("10.0.0.50/32")
	vipB = netip.MustParsePrefix("fd00::50/128")
)

type changes struct {
	mu  sync.Mutex
	got []string
}

func (c *changes) record(a netip.Addr, present bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := "-" + a.String()
	if present {
		s = "+" + a.String()
	}
	c.got = append(c.got, s)
}

func (c *changes) list() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.got)
}

func newLeased(t *testing.T) (*Leased, *FakeExpiring, *FakeAnnouncer, *changes) {
	t.Helper()
	k := NewFakeExpiring("eth0")
	ann := &FakeAnnouncer{}
	ch := &changes{}
	return &Leased{Addrs: k, Announcer: ann, Lifetime: 10 * time.Second, Burst: []time.Duration{0, 20 * time.Millisecond},
		OnChange: ch.record}, k, ann, ch
}

func TestLeasedAddAnnouncesAndReports(t *testing.T) {
	l, k, ann, ch := newLeased(t)
	ctx := context.Background()
	if err := l.Add(ctx, "eth0", vipA); err != nil {
		t.Fatal(err)
	}
	if err := l.Add(ctx, "eth0", vipB); err != nil {
		t.Fatal(err)
	}
	if ops := k.Ops(); !reflect.DeepEqual(ops, []string{"add-address eth0 10.0.0.50/32 valid 10s", "add-address eth0 fd00::50/128 valid 10s"}) {
		t.Errorf("ops %q", ops)
	}
	time.Sleep(100 * time.Millisecond)
	sent := ann.Sent()
	slices.Sort(sent)
	want := []string{"announce eth0 10.0.0.50", "announce eth0 10.0.0.50", "announce eth0 fd00::50", "announce eth0 fd00::50"}
	if !reflect.DeepEqual(sent, want) {
		t.Errorf("announced %q, want %q (a burst of 2 each)", sent, want)
	}
	if err := l.Delete(ctx, "eth0", vipA); err != nil {
		t.Fatal(err)
	}
	if got := ch.list(); !reflect.DeepEqual(got, []string{"+10.0.0.50", "+fd00::50", "-10.0.0.50"}) {
		t.Errorf("changes %q", got)
	}
	if err := l.Delete(ctx, "eth0", vipA); !errors.Is(err, ErrNotFound) {
		t.Errorf("deleting a missing address: %v, want ErrNotFound", err)
	}
}

// Renewal keeps a leased address alive past its lifetime; an address
// deleted meanwhile is not brought back; without Keep nothing is renewed.
func TestLeasedRenew(t *testing.T) {
	l, k, _, _ := newLeased(t)
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

// A predecessor's VIPs (finite lifetime, no lease) are removed at start;
// permanent addresses and other addresses stay.
func TestLeasedRemoveStaleAndReleaseAll(t *testing.T) {
	l, k, _, ch := newLeased(t)
	ctx := context.Background()
	other := netip.MustParsePrefix("10.0.0.99/32")
	_ = k.AddExpiring(ctx, "eth0", vipA, time.Minute) // left by a killed agent
	_ = k.AddExpiring(ctx, "eth0", other, time.Minute)
	_ = k.Fake.Add(ctx, "eth0", vipB) // permanent: an operator's
	if err := l.RemoveStale(ctx, "eth0", []netip.Addr{vipA.Addr(), vipB.Addr()}); err != nil {
		t.Fatal(err)
	}
	got, _ := k.List(ctx, "eth0")
	if slices.Contains(got, vipA) || !slices.Contains(got, vipB) || !slices.Contains(got, other) {
		t.Errorf("after RemoveStale: %v", got)
	}
	_ = l.Add(ctx, "eth0", vipA)
	if err := l.ReleaseAll(ctx); err != nil {
		t.Fatal(err)
	}
	if got, _ := k.List(ctx, "eth0"); slices.Contains(got, vipA) {
		t.Errorf("ReleaseAll left %v", got)
	}
	if c := ch.list(); !reflect.DeepEqual(c, []string{"-10.0.0.50", "+10.0.0.50", "-10.0.0.50"}) {
		t.Errorf("changes %q", c)
	}
}
