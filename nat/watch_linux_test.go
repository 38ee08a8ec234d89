package nat

import (
	"context"
	"testing"
	"time"
)

// TestWatchSeesAFlush: someone flushing the whole ruleset is signalled at
// once, and so is lvsd replacing its own tables; adding a table is not.
func TestWatchSeesAFlush(t *testing.T) {
	requireNetAdmin(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ns := newTestNS(t)
	k := NewKernel(InNetNS(ns.fd))
	if err := k.Apply(ctx, mustRender(t, goldenSpec(t, "conn-sync"))); err != nil {
		t.Fatal(err)
	}
	changed, err := k.Watch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ns.nftStdin(t, "table inet other {\n}\n")
	select {
	case <-changed:
		t.Fatal("signalled for a new table")
	case <-time.After(200 * time.Millisecond):
	}
	start := time.Now()
	ns.nft(t, "flush", "ruleset")
	select {
	case <-changed:
		t.Logf("flush signalled after %s", time.Since(start))
	case <-time.After(time.Second):
		t.Fatal("no signal within 1 s of nft flush ruleset")
	}
	if d, err := k.Installed(ctx); err != nil || d != "" {
		t.Fatalf("after the flush Installed() = %q, %v", d, err)
	}
	cancel()
	select {
	case _, ok := <-changed:
		for ok {
			_, ok = <-changed
		}
	case <-time.After(time.Second):
		t.Fatal("the channel stayed open after the context ended")
	}
}
