package agent

import (
	"errors"
	"strings"
	"testing"

	"github.com/lvsd/lvsd/agent/planner"

	"github.com/lvsd/lvsd/arp/sysctl"
	"github.com/lvsd/lvsd/ipvs"
)

// A sysctl that cannot be set says what to do, by the kind of its error:
// an IPVS key missing means the module is not loaded, a read-only one that
// the host must set it.
func TestSysctlError(t *testing.T) {
	ctx := t.Context()
	sysctls := sysctl.NewFake(map[string]string{"net/ipv4/ip_forward": "0"})
	sysctls.SetReadOnly("net/ipv4/ip_forward")
	k := Kernel{Sysctls: sysctls}
	for _, tc := range []struct {
		key, hint string
		kind      error
	}{
		{ipvs.ExpireNodestConn, "modprobe ip_vs", sysctl.ErrMissing},
		{"net/ipv4/conf/eth9/arp_ignore", "", sysctl.ErrMissing}, // no module to load: its interface is gone
		{"net/ipv4/ip_forward", "read-only /proc/sys", sysctl.ErrReadOnly},
	} {
		err := k.Apply(ctx, []planner.Op{{Kind: planner.SetSysctl, Detail: &planner.Detail{Key: tc.key, Value: "1"}}})[0]
		if !errors.Is(err, tc.kind) {
			t.Errorf("setting %s: %v, want %v", tc.key, err, tc.kind)
		}
		if hinted := strings.Contains(err.Error(), "("); hinted != (tc.hint != "") || !strings.Contains(err.Error(), tc.hint) {
			t.Errorf("setting %s: %q, want the hint %q", tc.key, err, tc.hint)
		}
	}
}

// The view of the kernel keeps no counters of its own for a destination
// without traffic: every such one shares the zero, and one with traffic
// keeps its own.
func TestIdleDestinationsShareTheirCounters(t *testing.T) {
	ctx := t.Context()
	fake := ipvs.NewFake()
	svc := ipvs.Service{ServiceKey: webKey, Scheduler: "mh"}
	a, b := dest(1, 1), dest(2, 1)
	for _, err := range []error{fake.AddService(ctx, svc), fake.AddDestination(ctx, webKey, masq(a)), fake.AddDestination(ctx, webKey, masq(b))} {
		if err != nil {
			t.Fatal(err)
		}
	}
	busy := ipvs.Stats{Connections: 3, PacketsIn: 30, BytesIn: 3000}
	if err := fake.SetStats(webKey, b.Key(), busy); err != nil {
		t.Fatal(err)
	}
	view, err := Kernel{IPVS: fake}.readServices(ctx, []ipvs.ServiceKey{webKey})
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range view.Services.At(webKey).Destinations {
		switch d.DestinationKey {
		case a.Key():
			if d.Stats != &noTraffic {
				t.Errorf("%s without traffic has counters of its own", d.DestinationKey)
			}
		case b.Key():
			if d.Stats == &noTraffic || d.Traffic() != busy {
				t.Errorf("%s: counters %+v, want its own %+v", d.DestinationKey, d.Traffic(), busy)
			}
		}
	}
	if noTraffic != (ipvs.Stats{}) {
		t.Errorf("the shared zero was written: %+v", noTraffic)
	}
}
