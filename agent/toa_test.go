package agent

import (
	"errors"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/lvsd/lvsd/agent/planner"
	"github.com/lvsd/lvsd/nat/toa"
)

const toaWeb = "service: web\nvip: 10.0.0.50\nports: [443]\nforwarding: fullnat\nclient_address: toa\n" +
	"fullnat:\n  source_addresses: [10.0.1.200]\nbackends:\n  - {address: 10.0.1.11}\n"

// The director's TOA program follows the services with client_address toa
// through the fake: attached with the first, its services updated on a
// change, adopted as found by a restarted agent, removed with the last.
func TestReconcileTOA(t *testing.T) {
	e := newEnv(t)
	e.service("web", toaWeb)
	a := e.agent()
	steps := []struct {
		name  string
		do    func() *Agent
		calls []string
	}{
		{"the first service", func() *Agent { return a }, []string{"services 1", "attach eth0"}},
		{"nothing changed", func() *Agent { return a }, nil},
		{"a restarted agent adopts it", func() *Agent { a = e.agent(); return a }, nil},
		{"an upgraded agent replaces the previous release's program", func() *Agent {
			e.toa.SetOutdated("eth0")
			a = e.agent()
			return a
		}, []string{"attach eth0"}},
		{"and then leaves it", func() *Agent { a = e.agent(); return a }, nil},
		{"a second service", func() *Agent {
			e.service("api", strings.NewReplacer("web", "api", "10.0.0.50", "10.0.0.51", "10.0.1.200", "10.0.1.201").Replace(toaWeb))
			e.reload(a)
			return a
		}, []string{"services 2"}},
		{"one turned off", func() *Agent {
			e.service("api", strings.Replace(strings.NewReplacer("web", "api", "10.0.0.50", "10.0.0.51", "10.0.1.200", "10.0.1.201").Replace(toaWeb), "client_address: toa\n", "", 1))
			e.reload(a)
			return a
		}, []string{"services 1"}},
		{"the last turned off", func() *Agent {
			e.service("web", strings.Replace(toaWeb, "client_address: toa\n", "", 1))
			e.reload(a)
			return a
		}, []string{"remove"}},
		{"nothing left to do", func() *Agent { return a }, nil},
	}
	for _, s := range steps {
		ag := s.do()
		e.resync(ag)
		if got := e.toa.Calls(); !slices.Equal(got, s.calls) {
			t.Fatalf("%s: TOA calls %q, want %q", s.name, got, s.calls)
		}
	}
	if ifaces, vips, removed := e.toa.State(); len(ifaces)+len(vips) > 0 || !removed {
		t.Errorf("left: %v %v, removed %v", ifaces, vips, removed)
	}
}

// A reload that turns TOA on applies it in the pass right after, without
// waiting for the audit to read the globals again.
func TestReloadTurnsTOAOn(t *testing.T) {
	e := newEnv(t)
	e.service("web", strings.Replace(toaWeb, "client_address: toa\n", "", 1))
	a := e.agent()
	e.reconcile(a)
	e.toa.Calls()
	e.service("web", toaWeb)
	e.reload(a)
	e.reconcile(a)
	if got, want := e.toa.Calls(), []string{"services 1", "attach eth0"}; !slices.Equal(got, want) {
		t.Fatalf("TOA calls %q, want %q", got, want)
	}
	ifaces, vips, _ := e.toa.State()
	if !slices.Equal(ifaces, []string{"eth0"}) || !slices.Equal(vips, []netip.AddrPort{netip.MustParseAddrPort("10.0.0.50:443")}) {
		t.Errorf("state %v %v", ifaces, vips)
	}
}

// A failed attach is retried at the next pass.
func TestTOAFailureRetried(t *testing.T) {
	e := newEnv(t)
	e.service("web", toaWeb)
	a := e.agent()
	e.toa.FailNext(errors.New("no BPF file system"))
	e.reconcile(a)
	e.toa.Calls()
	e.reconcile(a)
	if ifaces, vips, _ := e.toa.State(); !slices.Equal(ifaces, []string{"eth0"}) || len(vips) != 1 {
		t.Errorf("after the retry: %v %v (calls %q)", ifaces, vips, e.toa.Calls())
	}
}

// A director whose kernel has no TOA program fails the ops with a word
// saying so, and with no service asking for it has nothing to remove.
func TestTOAWithoutProgram(t *testing.T) {
	ops := []planner.Op{{Kind: planner.AttachTOA, Detail: &planner.Detail{Interface: "eth0"}}, {Kind: planner.RemoveTOA, Detail: &planner.Detail{}}}
	errs := Kernel{}.Apply(t.Context(), ops)
	if errs[0] == nil || !strings.Contains(errs[0].Error(), "cannot run the TOA program") || errs[1] != nil {
		t.Errorf("errors %v", errs)
	}
}

// lvsd cleanup on a stopped director removes a pinned program, and with
// nothing pinned does nothing.
func TestCleanupTOA(t *testing.T) {
	prog := toa.NewFakeDirector()
	if err := prog.Attach(t.Context(), "eth0"); err != nil {
		t.Fatal(err)
	}
	for _, want := range [][]string{{"toa-remove"}, nil} {
		ops, err := CleanupTOA(t.Context(), Kernel{TOA: prog})
		var got []string
		for _, op := range ops {
			got = append(got, op.Describe())
		}
		if err != nil || !slices.Equal(got, want) || prog.Pinned() {
			t.Errorf("cleanup: %q, %v, pinned %v; want %q", got, err, prog.Pinned(), want)
		}
	}
}
