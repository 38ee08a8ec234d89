package realserver

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/lvsd/lvsd/agent/config"
	"github.com/lvsd/lvsd/agent/planner"
	"github.com/lvsd/lvsd/arp"
	"github.com/lvsd/lvsd/arp/sysctl"
	"github.com/lvsd/lvsd/nat"
)

// previousRecord is realserver.json as the release before the shared
// ownership record wrote it, byte for byte: addresses as bare prefixes
// (on lo), a drained server, a tunnel device brought up and one created,
// a GUE port and the MSS clamp's tables.
const previousRecord = `{
  "addresses": [
    "10.0.0.50/32",
    "2001:db8::10/128"
  ],
  "sysctls": [
    {
      "key": "net/ipv4/conf/all/arp_ignore",
      "previous": "0",
      "value": "1"
    },
    {
      "key": "net/ipv4/conf/tunl0/rp_filter",
      "previous": "1",
      "value": "0"
    }
  ],
  "links": [
    {
      "name": "tunl0",
      "kind": "ipip"
    },
    {
      "name": "ip6tnl0",
      "kind": "ip6tnl",
      "created": true
    }
  ],
  "fou_ports": [
    {
      "port": 6080
    }
  ],
  "nft": true,
  "drained": true,
  "drained_at": "2026-11-03T09:30:00Z"
}`

// The record of the previous release reads into the shared format, with
// its addresses on lo and its drain state.
func TestRecordReadsPreviousFormat(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, RecordFile), []byte(previousRecord), 0o600); err != nil {
		t.Fatal(err)
	}
	rec, err := LoadRecord(dir)
	if err != nil {
		t.Fatal(err)
	}
	want := Record{
		Ownership: planner.Ownership{
			Addresses: []planner.OwnedAddress{{Interface: "lo", Prefix: pfx("10.0.0.50/32")}, {Interface: "lo", Prefix: pfx("2001:db8::10/128")}},
			Sysctls: []OwnedSysctl{{Key: "net/ipv4/conf/all/arp_ignore", Previous: "0", Value: "1"},
				{Key: "net/ipv4/conf/tunl0/rp_filter", Previous: "1", Value: "0"}},
			Links:    []planner.OwnedLink{{Name: "tunl0", Kind: "ipip"}, {Name: "ip6tnl0", Kind: "ip6tnl", Created: true}},
			FouPorts: []planner.OwnedFouPort{{Port: 6080}},
			NAT:      true,
		},
		Drained:   true,
		DrainedAt: time.Date(2026, 11, 3, 9, 30, 0, 0, time.UTC),
	}
	if !rec.Ownership.Equal(want.Ownership) || rec.Drained != want.Drained || !rec.DrainedAt.Equal(want.DrainedAt) {
		t.Fatalf("read %+v\nwant %+v", rec, want)
	}

	// Written again, it keeps the previous release's format (which that
	// release can still read) and reads back the same.
	if err := SaveRecord(dir, rec); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, RecordFile))
	if err != nil {
		t.Fatal(err)
	}
	var written, previous any
	if err := errors.Join(json.Unmarshal(b, &written), json.Unmarshal([]byte(previousRecord), &previous)); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(written, previous) {
		t.Errorf("the record was not written as the previous release wrote it:\n%s\nwant\n%s", b, previousRecord)
	}
	again, err := LoadRecord(dir)
	if err != nil || !again.Ownership.Equal(rec.Ownership) || again.Drained != rec.Drained || !again.DrainedAt.Equal(rec.DrainedAt) {
		t.Errorf("round trip: %+v, %v\nwant %+v", again, err, rec)
	}
}

// `lvsd cleanup` undoes everything the previous release recorded and keeps
// the drain state.
func TestCleanupOfPreviousFormat(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, RecordFile), []byte(previousRecord), 0o600); err != nil {
		t.Fatal(err)
	}
	sys := sysctl.NewFakeConf("eth0", "tunl0")
	sys.Put("net/ipv4/conf/all/arp_ignore", "1")
	sys.Put("net/ipv4/conf/tunl0/rp_filter", "0")
	tun := arp.NewFakeTunnels(arp.Link{Name: "tunl0", Kind: arp.KindIPIP, Up: true}, arp.Link{Name: "ip6tnl0", Kind: arp.KindIP6IP6, Up: true})
	if err := tun.AddFouPort(ctx, arp.FouPort{Port: 6080}); err != nil {
		t.Fatal(err)
	}
	nft := nat.NewFake()
	if err := nft.Apply(ctx, build(tunnelConfig(config.EncapGUE, "203.0.113.10"), nil).Tunnel.NAT); err != nil {
		t.Fatal(err)
	}
	h := Host{Addrs: newLo(t, "10.0.0.50/32", "2001:db8::10/128"), Sysctls: sys, Tunnels: tun, NAT: nft}

	ops, err := Cleanup(ctx, h, dir)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"set-link-down tunl0", "delete-link ip6tnl0", "delete-address 10.0.0.50/32 dev lo",
		"delete-address 2001:db8::10/128 dev lo", "delete-fou gue port 6080", "remove-nft-tables ip/ip6 lvsd",
		"restore-sysctl net/ipv4/conf/all/arp_ignore=0", "restore-sysctl net/ipv4/conf/tunl0/rp_filter=1"}
	if got := opStrings(ops); !slices.Equal(got, want) {
		t.Errorf("cleanup:\n got %q\nwant %q", got, want)
	}
	rec, err := LoadRecord(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !rec.Ownership.Equal(planner.Ownership{}) || !rec.Drained || rec.DrainedAt.IsZero() {
		t.Errorf("after cleanup: %+v, want nothing owned and still drained", rec)
	}
	if lo, _ := h.Addrs.List(ctx, "lo"); len(lo) != 2 {
		t.Errorf("lo holds %v, want only the loopback addresses", lo)
	}
}
