package toa

import (
	"context"
	"net/netip"
	"path/filepath"
	"strings"
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

// TestOpenWithoutBPFFS: a pin root outside a BPF file system is refused
// with what to do, before anything is loaded.
func TestOpenWithoutBPFFS(t *testing.T) {
	root := filepath.Join(t.TempDir(), "lvsd", "toa")
	_, err := OpenDirector(context.Background(), DirectorOptions{Options: Options{PinRoot: root}})
	if err == nil || !strings.Contains(err.Error(), "not on a BPF file system") || !strings.Contains(err.Error(), "mount -t bpf") {
		t.Errorf("director: %v; want it to say the root is not on a BPF file system and how to mount one", err)
	}
	_, err = OpenRealServer(context.Background(), Options{PinRoot: root})
	if err == nil || !strings.Contains(err.Error(), "not on a BPF file system") {
		t.Errorf("real server: %v; want it to say the root is not on a BPF file system", err)
	}
}
