package arp

import (
	"context"
	"testing"
)

func TestFakeLinks(t *testing.T) {
	var f FakeLinks
	f.Set("eth1", false)
	ctx, cancel := context.WithCancel(context.Background())
	eth0, err := f.WatchLink(ctx, "eth0")
	if err != nil {
		t.Fatal(err)
	}
	eth1, _ := f.WatchLink(ctx, "eth1")
	if up := <-eth0; !up {
		t.Error("eth0 starts down")
	}
	if up := <-eth1; up {
		t.Error("eth1 starts up")
	}
	for _, step := range []struct {
		up   bool
		want []bool // states received after the step
	}{
		{false, []bool{false}},
		{false, nil}, // no change, no state
		{true, []bool{true}},
	} {
		f.Set("eth0", step.up)
		for _, w := range step.want {
			if got := <-eth0; got != w {
				t.Errorf("set %v: got %v", step.up, got)
			}
		}
		select {
		case got := <-eth0:
			t.Errorf("set %v: an extra state %v", step.up, got)
		default:
		}
	}
	// A watcher that falls behind gets the latest state only.
	f.Set("eth0", false)
	f.Set("eth0", true)
	if got := <-eth0; !got {
		t.Error("the latest state is up")
	}
	cancel()
	for range eth0 { // closed once ctx ends
	}
	for range eth1 {
	}
}
