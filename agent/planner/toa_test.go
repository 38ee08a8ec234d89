package planner

import (
	"fmt"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/lvsd/lvsd/agent/config"
	"github.com/lvsd/lvsd/ipvs/l4"
)

func fullnatService(name, vip, iface string, client config.ClientAddress, ports ...l4.PortRange) *config.Service {
	a := netip.MustParseAddr(vip)
	snat := netip.MustParseAddr("10.0.1.200")
	if a.Is6() {
		snat = netip.MustParseAddr("fd00:1::200")
	}
	return &config.Service{Name: name, File: "/etc/lvsd/services.d/" + name + ".yaml", Line: 1, VIP: a,
		Protocol: "tcp", Ports: ports, Forwarding: config.FullNAT, Scheduler: "mh", Interface: iface,
		SNATAddresses: []netip.Addr{snat}, ClientAddress: client,
		Backends: []config.Backend{{Addr: snat.Next(), Weight: 1}}}
}

func aps(s ...string) []netip.AddrPort {
	out := make([]netip.AddrPort, len(s))
	for i, v := range s {
		out[i] = netip.MustParseAddrPort(v)
	}
	return out
}

// The program goes on the interface each TOA service's VIP arrives on, for
// each of its VIP:ports; services without client_address toa add nothing.
func TestBuildTOA(t *testing.T) {
	one := func(p uint16) l4.PortRange { return l4.PortRange{From: p, To: p} }
	for _, c := range []struct {
		name     string
		services []*config.Service
		want     TOA
	}{
		{"none", []*config.Service{fullnatService("web", "10.0.0.50", "", config.ClientAddressDirector, one(443))}, TOA{}},
		{"the agent file's interface", []*config.Service{
			fullnatService("web", "10.0.0.50", "", config.ClientAddressTOA, one(443), l4.PortRange{From: 8000, To: 8001}),
			fullnatService("plain", "10.0.0.51", "", config.ClientAddressDirector, one(443)),
		}, TOA{Interfaces: []string{"eth0"}, Services: aps("10.0.0.50:443", "10.0.0.50:8000", "10.0.0.50:8001")}},
		{"a service's own interface, both families", []*config.Service{
			fullnatService("web6", "fd00::50", "eth1", config.ClientAddressTOA, one(443)),
			fullnatService("web", "10.0.0.50", "", config.ClientAddressTOA, one(443)),
		}, TOA{Interfaces: []string{"eth0", "eth1"}, Services: aps("10.0.0.50:443", "[fd00::50]:443")}},
	} {
		t.Run(c.name, func(t *testing.T) {
			d, err := Build(&config.Agent{Interface: "eth0"}, c.services)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(d.TOA, c.want) {
				t.Errorf("TOA %+v, want %+v", d.TOA, c.want)
			}
		})
	}
}

// More VIP:ports in all than the program's map holds refuse the
// configuration, each service within its own bound.
func TestBuildTOATooMany(t *testing.T) {
	var services []*config.Service
	for i := range 3 {
		services = append(services, fullnatService(fmt.Sprintf("s%d", i), fmt.Sprintf("10.0.0.%d", 50+i), "", config.ClientAddressTOA,
			l4.PortRange{From: 1000, To: 2999}))
	}
	_, err := Build(&config.Agent{Interface: "eth0"}, services)
	if err == nil || !strings.Contains(err.Error(), "6000 VIP:ports in all; the director's TOA program takes at most 4096") {
		t.Errorf("error %v", err)
	}
}

// A reload that turns client_address on for a service builds the program
// even though nothing else outside its IPVS services changed.
func TestRebuildTOA(t *testing.T) {
	agent := &config.Agent{Interface: "eth0"}
	one := l4.PortRange{From: 443, To: 443}
	before := []*config.Service{fullnatService("web", "10.0.0.50", "", config.ClientAddressDirector, one)}
	d, pieces, err := Rebuild(agent, before, nil, Desired{}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	after := []*config.Service{fullnatService("web", "10.0.0.50", "", config.ClientAddressTOA, one)}
	d2, _, err := Rebuild(agent, after, pieces, d, map[string]bool{"web": true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if want := (TOA{Interfaces: []string{"eth0"}, Services: aps("10.0.0.50:443")}); !reflect.DeepEqual(d2.TOA, want) {
		t.Errorf("TOA after the reload %+v, want %+v", d2.TOA, want)
	}
}

// Each step plans from what the previous left (Applied), and a plan made
// right after its predecessor ran is empty.
func TestPlanTOA(t *testing.T) {
	web := TOA{Interfaces: []string{"eth0"}, Services: aps("10.0.0.50:443")}
	two := TOA{Interfaces: []string{"eth0"}, Services: aps("10.0.0.50:443", "10.0.0.51:443")}
	moved := TOA{Interfaces: []string{"eth1"}, Services: aps("10.0.0.50:443", "10.0.0.51:443")}
	for _, c := range []struct {
		name    string
		desired TOA
		actual  TOA
		ops     []string
	}{
		{"nothing, nothing there", TOA{}, TOA{}, nil},
		{"the first service", web, TOA{}, []string{
			"toa-services 1 (10.0.0.50:443)",
			"toa-attach eth0 (VIPs with client_address toa arrive here)"}},
		{"adopted as found", web, TOA{Interfaces: []string{"eth0"}, Services: aps("10.0.0.50:443"), Pinned: true}, nil},
		{"a previous release's program, replaced in place", moved,
			TOA{Interfaces: []string{"eth0", "eth1"}, Outdated: []string{"eth0", "eth1"}, Services: two.Services, Pinned: true}, []string{
				"toa-attach eth1 (the attached program is another build's (an upgrade): replaced in place)",
				"toa-detach eth0 (no VIP with client_address toa arrives here)"}},
		{"a second service", two, TOA{Interfaces: []string{"eth0"}, Services: aps("10.0.0.50:443"), Pinned: true}, []string{
			"toa-services 2 (10.0.0.50:443 10.0.0.51:443)"}},
		{"another interface", moved, TOA{Interfaces: []string{"eth0"}, Services: two.Services, Pinned: true}, []string{
			"toa-attach eth1 (VIPs with client_address toa arrive here)",
			"toa-detach eth0 (no VIP with client_address toa arrives here)"}},
		{"the last service goes", TOA{}, TOA{Interfaces: []string{"eth1"}, Services: two.Services, Pinned: true}, []string{
			"toa-remove (no service has client_address toa)"}},
		{"pinned, attached nowhere, unwanted", TOA{}, TOA{Pinned: true}, []string{
			"toa-remove (no service has client_address toa)"}},
		{"a filter left on an interface, unwanted", TOA{}, TOA{Interfaces: []string{"eth0"}}, []string{
			"toa-remove (no service has client_address toa)"}},
		{"many VIP:ports", TOA{Interfaces: []string{"eth0"}, Services: aps("10.0.0.1:1", "10.0.0.1:2", "10.0.0.1:3", "10.0.0.1:4", "10.0.0.1:5", "10.0.0.1:6")},
			TOA{Interfaces: []string{"eth0"}, Pinned: true}, []string{"toa-services 6 (10.0.0.1:1 10.0.0.1:2 10.0.0.1:3 10.0.0.1:4 and 2 more)"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			in := PlanInput{Desired: Desired{TOA: c.desired}, Actual: Actual{TOA: c.actual}}
			ops, _ := Plan(in)
			if got := OpStrings(ops); !slices.Equal(got, c.ops) {
				t.Fatalf("ops %q\nwant %q", got, c.ops)
			}
			in.Actual.Applied(ops, make([]error, len(ops)))
			if again, _ := Plan(in); len(again) > 0 {
				t.Errorf("after the ops ran: %q", OpStrings(again))
			}
			if c.desired.Wanted() && !reflect.DeepEqual(in.Actual.TOA.Services, c.desired.Services) {
				t.Errorf("services after the ops %v, want %v", in.Actual.TOA.Services, c.desired.Services)
			}
		})
	}
}

// A failed op leaves the actual state as it was: the next pass plans it
// again.
func TestPlanTOAFailedOpRetried(t *testing.T) {
	in := PlanInput{Desired: Desired{TOA: TOA{Interfaces: []string{"eth0"}, Services: aps("10.0.0.50:443")}}}
	ops, _ := Plan(in)
	errs := make([]error, len(ops))
	errs[1] = errTest
	in.Actual.Applied(ops, errs)
	again, _ := Plan(in)
	if got := OpStrings(again); !slices.Equal(got, []string{"toa-attach eth0 (VIPs with client_address toa arrive here)"}) {
		t.Errorf("after a failed attach: %q", got)
	}
}

var errTest = errorString("test")

type errorString string

func (e errorString) Error() string { return string(e) }
