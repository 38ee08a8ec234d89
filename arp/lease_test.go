package arp

import (
	"context"
	"errors"
	"net/netip"
	"reflect"
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

func TestLeasedAddAndAnnounce(t *testing.T) {
	l, k, ann := newLeased(t)
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
