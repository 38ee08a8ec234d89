package toa

import (
	"context"
	"net/netip"
	"testing"
)

// TestLoadAdoptRemove loads both sides into the kernel (the verifier's
// verdict on this kernel), opens them again as a restarted lvsd would, finds
// the state the first left, and leaves nothing pinned after Remove.
func TestLoadAdoptRemove(t *testing.T) {
	requireRoot(t)
	ctx := context.Background()
	root := bpfFS(t)
	cg := cgroup(t)

	d, err := OpenDirector(ctx, DirectorOptions{Options: Options{PinRoot: root}})
	if err != nil {
		t.Fatal(err)
	}
	vips := []netip.AddrPort{netip.MustParseAddrPort("192.0.2.1:80"), netip.MustParseAddrPort("[2001:db8::1]:443")}
	if err := d.SetServices(ctx, vips); err != nil {
		t.Fatal(err)
	}
	d.Close()
	d, err = OpenDirector(ctx, DirectorOptions{Options: Options{PinRoot: root}})
	if err != nil {
		t.Fatalf("adopting: %v", err)
	}
	got, err := d.Services(ctx)
	if err != nil || len(got) != 2 {
		t.Fatalf("adopted services = %v, %v; want %v", got, err, vips)
	}

	r, err := OpenRealServer(ctx, Options{PinRoot: root})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Attach(ctx, cg); err != nil {
		t.Fatal(err)
	}
	r.Close()
	r, err = OpenRealServer(ctx, Options{PinRoot: root})
	if err != nil {
		t.Fatalf("adopting: %v", err)
	}
	if err := r.Attach(ctx, cg); err != nil {
		t.Fatalf("attaching again: %v", err)
	}
	if err := r.Remove(ctx); err != nil {
		t.Fatal(err)
	}
	r.Close()
	if err := d.Remove(ctx); err != nil {
		t.Fatal(err)
	}
	d.Close()
	assertNothingPinned(t, root)
}
