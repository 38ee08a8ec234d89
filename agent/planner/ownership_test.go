package planner

import (
	"encoding/json"
	"testing"

	arp "github.com/lvsd/lvsd/arp/spec"
)

// An address reads as written and as the bare prefix earlier real-server
// records held, which leaves the interface to the reader.
func TestOwnedAddressJSON(t *testing.T) {
	var got []OwnedAddress
	if err := json.Unmarshal([]byte(`[{"interface":"eth0","prefix":"10.0.0.50/32"},"fd00::50/128"]`), &got); err != nil {
		t.Fatal(err)
	}
	want := []OwnedAddress{{Interface: "eth0", Prefix: pfx("10.0.0.50/32")}, {Prefix: pfx("fd00::50/128")}}
	if len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
		t.Errorf("read %+v, want %+v", got, want)
	}
	if err := json.Unmarshal([]byte(`["not a prefix"]`), &got); err == nil {
		t.Error("a bad prefix read without an error")
	}
}

// A record claims only its own kinds: the director sets sysctls and
// nftables tables without recording them; a real server records both.
func TestIntendClaims(t *testing.T) {
	ops := []Op{
		{Kind: SetSysctl, Detail: &Detail{Key: "net/ipv4/conf/all/arp_ignore", Value: "1", Previous: "0"}},
		{Kind: ReplaceNAT},
		{Kind: AddAddress, Detail: &Detail{Interface: Loopback, Address: pfx("10.0.0.50/32")}},
		{Kind: CreateLink, Detail: &Detail{Link: TunnelLink{Name: "tunl0", Kind: arp.KindIPIP}}},
		{Kind: AddFouPort, Detail: &Detail{Fou: arp.FouPort{Port: 6080}}},
	}
	if o := (Ownership{}).Intend(ops, ClaimServices); !o.Equal(Ownership{}) {
		t.Errorf("the reconciler's record claimed %+v", o)
	}
	o := Ownership{}.Intend(ops, ClaimAddresses|ClaimHost)
	if len(o.Sysctls) != 1 || !o.NAT || len(o.Addresses) != 1 || len(o.Links) != 1 || !o.Links[0].Created || len(o.FouPorts) != 1 {
		t.Errorf("the real server's record: %+v", o)
	}
	// A sysctl set again keeps the value found first: cleanup restores it.
	again := o.Intend([]Op{{Kind: SetSysctl, Detail: &Detail{Key: "net/ipv4/conf/all/arp_ignore", Value: "2", Previous: "1"}}}, ClaimHost)
	if s := again.Sysctls[0]; s.Previous != "0" || s.Value != "2" || o.Sysctls[0].Value != "1" {
		t.Errorf("set again: %+v (the original now %+v)", s, o.Sysctls[0])
	}
	// Gone objects leave; the others stay.
	gone := o.After(ops, []bool{true, true, false, true, false})
	if len(gone.Sysctls) != 0 || gone.NAT || len(gone.Addresses) != 1 || len(gone.Links) != 0 || len(gone.FouPorts) != 1 {
		t.Errorf("after: %+v", gone)
	}
}
