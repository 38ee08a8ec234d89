package toa

import (
	"bytes"
	"context"
	"errors"
	"net/netip"
	"slices"
	"testing"
)

func TestOptionRoundTrip(t *testing.T) {
	v6 := []byte{254, 20, 0, 1, 0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1}
	for _, tc := range []struct {
		client string
		want   []byte
	}{
		{"192.0.2.7:443", []byte{254, 8, 0x01, 0xbb, 192, 0, 2, 7}},
		{"[::ffff:192.0.2.7]:443", []byte{254, 8, 0x01, 0xbb, 192, 0, 2, 7}},
		{"[2001:db8::1]:1", v6},
	} {
		ap := netip.MustParseAddrPort(tc.client)
		want := tc.want
		if got := Option(ap); !bytes.Equal(got, want) {
			t.Errorf("Option(%s) = %v, want %v", ap, got, want)
		}
		got, ok := ParseOption(append([]byte{2, 4, 5, 0xb4, 1, 1}, want...))
		if !ok || got != netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port()) {
			t.Errorf("ParseOption(Option(%s)) = %v, %v", ap, got, ok)
		}
	}
}

func TestParseOptionRejects(t *testing.T) {
	for name, opts := range map[string][]byte{
		"empty":                nil,
		"end of options":       {0, 254, 8, 0, 1, 192, 0, 2, 7},
		"truncated":            {254, 8, 0, 1, 192},
		"length below 2":       {254, 1, 0, 1, 192, 0, 2, 7},
		"other length":         {254, 6, 0, 1, 192, 0},
		"length past the end":  {1, 254, 30, 0, 1, 192, 0, 2, 7},
		"lone kind":            {1, 1, 1, 254},
		"kind and length only": {254, 2},
	} {
		if got, ok := ParseOption(opts); ok {
			t.Errorf("%s: ParseOption(%v) = %v, want none", name, opts, got)
		}
	}
}

func FuzzParseOption(f *testing.F) {
	f.Add(Option(netip.MustParseAddrPort("192.0.2.7:443")))
	f.Add(Option(netip.MustParseAddrPort("[2001:db8::1]:80")))
	f.Add([]byte{2, 4, 5, 0xb4, 1, 1, 8, 10, 0, 0, 0, 1, 0, 0, 0, 0, 254, 8, 0, 1, 10, 0, 0, 1})
	f.Fuzz(func(t *testing.T, opts []byte) {
		ap, ok := ParseOption(opts)
		if !ok {
			return
		}
		// What it finds, written again, is found again.
		if got, ok := ParseOption(Option(ap)); !ok || got != ap {
			t.Fatalf("ParseOption(Option(%v)) = %v, %v", ap, got, ok)
		}
	})
}

func TestKeysRejectBadInput(t *testing.T) {
	for _, ap := range []netip.AddrPort{{}, netip.MustParseAddrPort("192.0.2.1:0"), netip.MustParseAddrPort("[fe80::1%eth0]:80")} {
		if _, err := vipKeys([]netip.AddrPort{ap}); err == nil {
			t.Errorf("vipKeys(%v) accepted", ap)
		}
	}
	if _, err := addrKeys([]netip.Addr{{}}); err == nil {
		t.Error("addrKeys(invalid) accepted")
	}
	keys, err := vipKeys([]netip.AddrPort{netip.MustParseAddrPort("192.0.2.1:80"), netip.MustParseAddrPort("[::ffff:192.0.2.1]:80")})
	if err != nil || len(keys) != 1 {
		t.Errorf("a mapped duplicate: keys %v, %v; want one", keys, err)
	}
	if got := keys[0].addrPort(); got != netip.MustParseAddrPort("192.0.2.1:80") {
		t.Errorf("key round trip = %v", got)
	}
	if keys[0].Port != [2]byte{0, 80} || keys[0].Addr[10] != 0xff || keys[0].Addr[12] != 192 {
		t.Errorf("key layout %v: want network byte order, IPv4-mapped", keys[0])
	}
}

func TestFakes(t *testing.T) {
	ctx := context.Background()
	d := NewFakeDirector()
	vip := netip.MustParseAddrPort("192.0.2.1:80")
	for _, step := range []func() error{
		func() error { return d.Attach(ctx, "eth0") },
		func() error { return d.Attach(ctx, "eth0") },
		func() error { return d.SetServices(ctx, []netip.AddrPort{vip, vip}) },
	} {
		if err := step(); err != nil {
			t.Fatal(err)
		}
	}
	ifaces, services, removed := d.State()
	if !slices.Equal(ifaces, []string{"eth0"}) || !slices.Equal(services, []netip.AddrPort{vip}) || removed {
		t.Errorf("director state %v %v %v", ifaces, services, removed)
	}
	if err := d.SetServices(ctx, []netip.AddrPort{{}}); err == nil {
		t.Error("the fake director accepted an invalid VIP")
	}
	boom := errors.New("boom")
	d.FailNext(boom)
	if err := d.Remove(ctx); !errors.Is(err, boom) {
		t.Errorf("FailNext: %v", err)
	}
	if err := d.Remove(ctx); err != nil {
		t.Fatal(err)
	}
	if ifaces, services, removed := d.State(); ifaces != nil || services != nil || !removed {
		t.Errorf("after Remove: %v %v %v", ifaces, services, removed)
	}

	r := NewFakeRealServer()
	dir := netip.MustParseAddr("10.0.0.1")
	if err := r.Attach(ctx, "/sys/fs/cgroup"); err != nil {
		t.Fatal(err)
	}
	if err := r.SetServices(ctx, []netip.AddrPort{vip}); err != nil {
		t.Fatal(err)
	}
	if err := r.SetDirectors(ctx, []netip.Addr{dir, dir}); err != nil {
		t.Fatal(err)
	}
	cg, svcs, dirs, removed := r.State()
	if cg != "/sys/fs/cgroup" || !slices.Equal(svcs, []netip.AddrPort{vip}) || !slices.Equal(dirs, []netip.Addr{dir}) || removed {
		t.Errorf("real server state %q %v %v %v", cg, svcs, dirs, removed)
	}
	if err := r.Remove(ctx); err != nil {
		t.Fatal(err)
	}
	if cg, _, _, removed := r.State(); cg != "" || !removed {
		t.Errorf("after Remove: %q %v", cg, removed)
	}
}
