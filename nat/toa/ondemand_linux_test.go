package toa

import (
	"context"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// TestOnDemandDirector: reads load nothing and create nothing while nothing
// is pinned; the first change loads and pins; a second lvsd (another
// OnDemandDirector) reads what the first left without loading, and its
// Remove leaves nothing, on any interface.
func TestOnDemandDirector(t *testing.T) {
	requireRoot(t)
	ctx := context.Background()
	root := bpfFS(t)
	tp := newTopo(t)
	opts := DirectorOptions{Options: Options{PinRoot: root}, NetNS: nsHandle(t, tp.director)}

	first := NewOnDemandDirector(opts)
	if first.Pinned() {
		t.Fatal("pinned before any change")
	}
	ifaces, err1 := first.Attached(ctx)
	vips, err2 := first.Services(ctx)
	stats, err3 := first.Stats(ctx)
	if len(ifaces)+len(vips) > 0 || stats != (DirectorStats{}) || err1 != nil || err2 != nil || err3 != nil {
		t.Fatalf("reads before any change: %v %v %+v, errors %v %v %v", ifaces, vips, stats, err1, err2, err3)
	}
	if _, err := os.Stat(filepath.Join(root, "director")); !os.IsNotExist(err) {
		t.Fatalf("a read created the pin folder: %v", err)
	}
	if err := first.Remove(ctx); err != nil {
		t.Fatalf("removing nothing: %v", err)
	}

	want := []netip.AddrPort{netip.AddrPortFrom(vip4, port), netip.AddrPortFrom(vip6, port)}
	if err := first.SetServices(ctx, want); err != nil {
		t.Fatal(err)
	}
	if err := first.Attach(ctx, "dc"); err != nil {
		t.Fatal(err)
	}
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}

	second := NewOnDemandDirector(opts) // a restarted lvsd
	if !second.Pinned() {
		t.Fatal("not pinned after a change")
	}
	ifaces, err := second.Attached(ctx)
	if err != nil || !slices.Equal(ifaces, []string{"dc"}) {
		t.Fatalf("attached %v, %v; want [dc]", ifaces, err)
	}
	vips, err = second.Services(ctx)
	slices.SortFunc(vips, netip.AddrPort.Compare)
	if err != nil || !slices.Equal(vips, want) {
		t.Fatalf("services %v, %v; want %v", vips, err, want)
	}
	if second.d != nil {
		t.Fatal("a read loaded the program")
	}
	if err := second.Remove(ctx); err != nil {
		t.Fatal(err)
	}
	if ifaces, err := second.Attached(ctx); err != nil || len(ifaces) > 0 {
		t.Fatalf("attached after Remove: %v, %v", ifaces, err)
	}
	assertNothingPinned(t, root)
}

// TestOnDemandRealServer: nothing loaded or pinned before the first change;
// a restarted lvsd's Remove (lvsd cleanup) finds and removes what the first
// left.
func TestOnDemandRealServer(t *testing.T) {
	requireRoot(t)
	ctx := context.Background()
	root := bpfFS(t)
	cg := cgroup(t)
	first := NewOnDemandRealServer(Options{PinRoot: root})
	if st, err := first.Stats(ctx); first.Pinned() || err != nil || st != (RealServerStats{}) {
		t.Fatalf("before any change: pinned %v, stats %+v, %v", first.Pinned(), st, err)
	}
	if err := first.SetServices(ctx, []netip.AddrPort{netip.AddrPortFrom(server4, port)}); err != nil {
		t.Fatal(err)
	}
	if err := first.SetDirectors(ctx, []netip.Addr{snat4}); err != nil {
		t.Fatal(err)
	}
	if err := first.Attach(ctx, cg); err != nil {
		t.Fatal(err)
	}
	first.Close()
	second := NewOnDemandRealServer(Options{PinRoot: root})
	if !second.Pinned() {
		t.Fatal("not pinned after a change")
	}
	if _, err := second.Stats(ctx); err != nil || second.r != nil {
		t.Fatalf("stats: %v, loaded %v", err, second.r != nil)
	}
	if err := second.Remove(ctx); err != nil {
		t.Fatal(err)
	}
	if second.Pinned() {
		t.Error("pinned after Remove")
	}
	assertNothingPinned(t, root)
}
