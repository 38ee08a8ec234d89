package bgp

import (
	"context"
	"errors"
	"net/netip"
	"slices"
	"testing"
)

func TestFake(t *testing.T) {
	cfg := baseConfig(PeerConfig{Address: routerA, ASN: 65000, BFD: true}, PeerConfig{Address: routerB, ASN: 65000})
	f, err := NewFake(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	vip := Route{Prefix: netip.MustParsePrefix("192.0.2.10/32")}
	vip2 := Route{Prefix: netip.MustParsePrefix("192.0.2.11/32")}
	if err := f.SetRoutes(ctx, []Route{vip, vip2}); err != nil {
		t.Fatal(err)
	}
	vip.ASPathPrepend = 3
	if err := f.SetRoutes(ctx, []Route{vip}); err != nil {
		t.Fatal(err)
	}
	if err := f.SetRoutes(ctx, []Route{{Prefix: netip.MustParsePrefix("2001:db8::1/128")}}); err == nil {
		t.Error("a family no peer carries was accepted")
	}
	boom := errors.New("boom")
	f.FailNext(boom)
	if err := f.SetRoutes(ctx, nil); !errors.Is(err, boom) {
		t.Errorf("FailNext: %v", err)
	}
	f.SetPeer(routerB, StateActive, "", "hold-timer-expired")
	st, _ := f.Status(ctx)
	if len(st.Peers) != 2 || st.Peers[0].Announced != 1 || st.Peers[0].BFD != "up" || st.Peers[1].Announced != 0 ||
		st.Peers[1].Flaps != 1 || st.Peers[1].LastFlapReason != "hold-timer-expired" || len(st.Routes) != 1 {
		t.Errorf("status %+v", st)
	}
	if err := f.Withdraw(ctx); err != nil {
		t.Fatal(err)
	}
	want := []string{"announce 192.0.2.10/32", "announce 192.0.2.11/32", "withdraw 192.0.2.11/32",
		"announce 192.0.2.10/32 prepend 3", "withdraw 192.0.2.10/32"}
	if got := f.Ops(); !slices.Equal(got, want) {
		t.Errorf("ops\n got %q\nwant %q", got, want)
	}
	if len(f.Routes()) != 0 {
		t.Error("routes left after Withdraw")
	}
}
