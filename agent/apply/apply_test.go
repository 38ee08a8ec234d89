package apply

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"testing"

	"github.com/lvsd/lvsd/agent/planner"
)

var vip = netip.MustParsePrefix("10.0.0.50/32")

// The claims are saved before anything runs, the record after the ops once
// more; a claim that cannot be saved runs nothing.
func TestApplyWritesAhead(t *testing.T) {
	var events []string
	a := Applier{Claims: planner.ClaimAddresses,
		Save: func(o planner.Ownership) error {
			events = append(events, fmt.Sprintf("save %d", len(o.Addresses)))
			return nil
		},
		Run: func(_ context.Context, ops []planner.Op) ([]error, []bool) {
			events = append(events, "run")
			return make([]error, len(ops)), []bool{false, true}
		}}
	ops := []planner.Op{{Kind: planner.AddAddress, Detail: &planner.Detail{Interface: "lo", Address: vip}},
		{Kind: planner.DeleteAddress, Detail: &planner.Detail{Interface: "lo", Address: netip.MustParsePrefix("10.0.0.51/32")}}}
	owned := planner.Ownership{Addresses: []planner.OwnedAddress{{Interface: "lo", Prefix: ops[1].Address}}}
	r, err := a.Apply(context.Background(), owned, ops, nil)
	if err != nil || len(r.After.Addresses) != 1 || r.After.Addresses[0].Prefix != vip {
		t.Fatalf("after %+v, %v", r.After, err)
	}
	if got := events; len(got) != 3 || got[0] != "save 2" || got[1] != "run" || got[2] != "save 1" {
		t.Errorf("events %q, want the claims saved, the run, the record saved", got)
	}

	a.Save = func(planner.Ownership) error { return errors.New("disk full") }
	events = nil
	if _, err := a.Apply(context.Background(), planner.Ownership{}, ops[:1], nil); err == nil || len(events) > 0 {
		t.Errorf("unsaved claims: %v, events %q", err, events)
	}
}

// A failed add stays claimed, unless the record holds only what lvsd made;
// an entry recorded before stays either way.
func TestApplyFailedAdd(t *testing.T) {
	ops := []planner.Op{{Kind: planner.AddAddress, Detail: &planner.Detail{Interface: "lo", Address: vip}},
		{Kind: planner.SetSysctl, Detail: &planner.Detail{Key: "net/ipv4/conf/all/arp_ignore", Value: "1", Previous: "0"}}}
	owned := planner.Ownership{Sysctls: []planner.OwnedSysctl{{Key: ops[1].Key, Previous: "0", Value: "1"}}}
	failAll := func(_ context.Context, ops []planner.Op) ([]error, []bool) {
		return []error{errors.New("no"), errors.New("no")}, make([]bool, len(ops))
	}
	for _, unclaim := range []bool{false, true} {
		a := Applier{Claims: planner.ClaimAddresses | planner.ClaimHost, UnclaimFailed: unclaim, Run: failAll,
			Save: func(planner.Ownership) error { return nil }}
		r, err := a.Apply(context.Background(), owned, ops, nil)
		if err != nil {
			t.Fatal(err)
		}
		if kept := len(r.After.Addresses) == 1; kept == unclaim || len(r.After.Sysctls) != 1 {
			t.Errorf("UnclaimFailed %v: %+v", unclaim, r.After)
		}
	}
}
