package realserver

import (
	"context"
	"errors"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/lvsd/lvsd/agent/config"
	"github.com/lvsd/lvsd/agent/planner"
	"github.com/lvsd/lvsd/arp"
	"github.com/lvsd/lvsd/arp/sysctl"
)

// journal puts the calls to both fakes in one list, to check their order.
type journal struct{ calls []string }

type loggedAddrs struct {
	arp.Addresses
	j *journal
}

func (l loggedAddrs) Add(ctx context.Context, dev string, p netip.Prefix) error {
	l.j.calls = append(l.j.calls, "add "+p.String())
	return l.Addresses.Add(ctx, dev, p)
}

func (l loggedAddrs) Delete(ctx context.Context, dev string, p netip.Prefix) error {
	l.j.calls = append(l.j.calls, "delete "+p.String())
	return l.Addresses.Delete(ctx, dev, p)
}

type loggedSysctls struct {
	sysctl.Interface
	j *journal
}

func (l loggedSysctls) Set(ctx context.Context, key, value string) error {
	l.j.calls = append(l.j.calls, "set "+key+"="+value)
	return l.Interface.Set(ctx, key, value)
}

// newLo returns an address fake whose lo holds what a fresh namespace has.
func newLo(t *testing.T, extra ...string) *arp.Fake {
	t.Helper()
	f := arp.NewFake("lo", "eth0")
	for _, p := range append([]string{"127.0.0.1/8", "::1/128"}, extra...) {
		if err := f.Add(context.Background(), "lo", pfx(p)); err != nil {
			t.Fatal(err)
		}
	}
	f.Ops()
	return f
}

func planFor(t *testing.T, h Host, d planner.RealServerDesired, rec Record) []planner.Op {
	t.Helper()
	a, _, err := h.ReadActual(context.Background(), d, rec.Ownership)
	if err != nil {
		t.Fatal(err)
	}
	return planner.PlanRealServer(d, a, rec.Ownership)
}

// What lvsd is about to add is on record before the first change, so a
// crash in between cannot orphan it; sysctls change before any VIP appears.
func TestApplyRecordsFirstAndOrders(t *testing.T) {
	j := &journal{}
	addrs, sys := newLo(t), sysctl.NewFakeConf("eth0")
	h := Host{Addrs: loggedAddrs{addrs, j}, Sysctls: loggedSysctls{sys, j}}
	d := build(config.RealServer{ARPInterfaces: []string{"eth0"}}, []netip.Addr{netip.MustParseAddr("10.0.0.50")})
	var rec Record
	var saves []Record
	save := func(r Record) error {
		if len(saves) == 0 && len(j.calls) > 0 {
			t.Errorf("the record was first saved after %d host calls", len(j.calls))
		}
		saves = append(saves, r)
		return nil
	}
	if err := h.Apply(context.Background(), planFor(t, h, d, rec), &rec, save); err != nil {
		t.Fatal(err)
	}
	if len(saves) != 1 || len(saves[0].Addresses) != 1 || len(saves[0].Sysctls) != 4 {
		t.Errorf("saves %+v, want one with the VIP and 4 sysctls", saves)
	}
	last := slices.Index(j.calls, "add 10.0.0.50/32")
	for i, c := range j.calls {
		if strings.HasPrefix(c, "set ") && i > last {
			t.Errorf("%q came after the VIP was added: %q", c, j.calls)
		}
	}
	if got := opStrings(planFor(t, h, d, rec)); len(got) != 0 {
		t.Errorf("second plan %q, want none", got)
	}
}

func TestApplySaveFailsChangesNothing(t *testing.T) {
	addrs, sys := newLo(t), sysctl.NewFakeConf()
	h := Host{Addrs: addrs, Sysctls: sys}
	d := build(config.RealServer{}, []netip.Addr{netip.MustParseAddr("10.0.0.50")})
	var rec Record
	err := h.Apply(context.Background(), planFor(t, h, d, rec), &rec, func(Record) error { return errors.New("disk full") })
	if err == nil || !strings.Contains(err.Error(), "nothing changed") {
		t.Errorf("err = %v", err)
	}
	if ops := append(addrs.Ops(), sys.Ops()...); len(ops) > 0 {
		t.Errorf("host changed without a record: %q", ops)
	}
	if len(rec.Addresses)+len(rec.Sysctls) > 0 {
		t.Errorf("record kept entries of changes never made: %+v", rec)
	}
}

// A read-only all/arp_ignore (a container's /proc/sys) holds back the VIPs:
// on lo they would be answered for by ARP.
func TestApplyGuardFailsNoVIP(t *testing.T) {
	addrs, sys := newLo(t), sysctl.NewFakeConf()
	sys.SetReadOnly("net/ipv4/conf/all/arp_ignore")
	h := Host{Addrs: addrs, Sysctls: sys}
	d := build(config.RealServer{}, []netip.Addr{netip.MustParseAddr("10.0.0.50"), netip.MustParseAddr("fd00::50")})
	var rec Record
	err := h.Apply(context.Background(), planFor(t, h, d, rec), &rec, func(Record) error { return nil })
	if err == nil || !strings.Contains(err.Error(), "ARP suppression is not in force") {
		t.Errorf("err = %v", err)
	}
	if ops := addrs.Ops(); len(ops) > 0 {
		t.Errorf("VIPs added without ARP suppression: %q", ops)
	}
	if len(rec.Addresses) > 0 || slices.ContainsFunc(rec.Sysctls, func(s OwnedSysctl) bool { return s.Key == "net/ipv4/conf/all/arp_ignore" }) {
		t.Errorf("record holds changes that failed: %+v", rec)
	}
}

// Deleting what someone already removed, or restoring a key whose
// interface went away, is done, not an error.
func TestApplyGoneIsDone(t *testing.T) {
	addrs, sys := newLo(t), sysctl.NewFakeConf()
	h := Host{Addrs: addrs, Sysctls: sys}
	rec := Record{Ownership: planner.Ownership{Addresses: []planner.OwnedAddress{{Interface: planner.Loopback, Prefix: pfx("10.0.0.50/32")}},
		Sysctls: []OwnedSysctl{{Key: "net/ipv4/conf/eth9/arp_ignore", Previous: "0", Value: "1"}}}}
	ops := []planner.Op{{Kind: planner.DeleteAddress, Detail: &planner.Detail{Interface: planner.Loopback, Address: pfx("10.0.0.50/32")}},
		{Kind: planner.RestoreSysctl, Detail: &planner.Detail{Key: "net/ipv4/conf/eth9/arp_ignore", Value: "0"}}}
	if err := h.Apply(context.Background(), ops, &rec, func(Record) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if len(rec.Addresses)+len(rec.Sysctls) > 0 {
		t.Errorf("record not emptied: %+v", rec)
	}
}
