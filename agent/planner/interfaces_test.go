package planner

import (
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/lvsd/lvsd/agent/config"
	"github.com/lvsd/lvsd/ipvs/l4"
)

func natService(name, vip, iface, gateway, gatewayIface string) *config.Service {
	s := &config.Service{Name: name, File: "/etc/lvsd/services.d/" + name + ".yaml", Line: 1, VIP: netip.MustParseAddr(vip),
		Protocol: "tcp", Ports: []l4.PortRange{{From: 80, To: 80}}, Forwarding: config.NAT, Scheduler: "mh",
		Interface: iface, GatewayInterface: gatewayIface}
	if gateway != "" {
		s.Gateway = netip.MustParseAddr(gateway)
	}
	return s
}

func host(a string) netip.Prefix { return netip.PrefixFrom(netip.MustParseAddr(a), 32) }

// Each address goes on the interface its service names: the VIP on the
// service's (the agent file's by default), a NAT gateway on
// gateway_interface (the service's by default); under BGP the VIP stays on
// lo. Two services may not put one address on two interfaces.
func TestBuildPlacesAddresses(t *testing.T) {
	bgp := &config.BGP{}
	cases := []struct {
		name     string
		bgp      *config.BGP
		services []*config.Service
		want     map[netip.Addr]map[netip.Prefix]string // by VIP; nil: every address on eth0
		sysctls  []string                               // keys that must be set
		err      string
	}{
		{name: "agent's interface", services: []*config.Service{natService("web", "10.0.0.50", "", "10.0.1.1", "")},
			want: map[netip.Addr]map[netip.Prefix]string{}, sysctls: []string{"net/ipv4/conf/eth0/send_redirects"}},
		{name: "vlan", services: []*config.Service{natService("web", "10.0.20.50", "eth0.20", "", "")},
			want:    map[netip.Addr]map[netip.Prefix]string{netip.MustParseAddr("10.0.20.50"): {host("10.0.20.50"): "eth0.20"}},
			sysctls: []string{"net/ipv4/conf/eth0.20/send_redirects"}},
		{name: "gateway follows the service's interface", services: []*config.Service{natService("web", "10.0.20.50", "eth0.20", "10.0.20.1", "")},
			want: map[netip.Addr]map[netip.Prefix]string{netip.MustParseAddr("10.0.20.50"): {host("10.0.20.50"): "eth0.20", host("10.0.20.1"): "eth0.20"}}},
		{name: "two-armed", services: []*config.Service{natService("web", "10.0.0.50", "", "10.0.1.1", "eth1")},
			want:    map[netip.Addr]map[netip.Prefix]string{netip.MustParseAddr("10.0.0.50"): {host("10.0.1.1"): "eth1"}},
			sysctls: []string{"net/ipv4/conf/eth0/send_redirects", "net/ipv4/conf/eth1/send_redirects"}},
		{name: "two VIPs share the inside gateway", services: []*config.Service{
			natService("web", "10.0.0.50", "", "10.0.1.1", "eth1"), natService("mail", "10.0.0.51", "", "10.0.1.1", "eth1")},
			want: map[netip.Addr]map[netip.Prefix]string{
				netip.MustParseAddr("10.0.0.50"): {host("10.0.1.1"): "eth1"}, netip.MustParseAddr("10.0.0.51"): {host("10.0.1.1"): "eth1"}}},
		{name: "bgp keeps the VIP on lo", bgp: bgp, services: []*config.Service{natService("web", "10.0.0.50", "eth1", "", "")},
			want:    map[netip.Addr]map[netip.Prefix]string{},
			sysctls: []string{"net/ipv4/conf/eth0/arp_ignore", "net/ipv4/conf/eth1/arp_ignore"}},
		{name: "one VIP, two interfaces", services: []*config.Service{
			natService("web", "10.0.0.50", "eth0", "", ""), func() *config.Service {
				s := natService("web443", "10.0.0.50", "eth1", "", "")
				s.Ports = []l4.PortRange{{From: 443, To: 443}}
				return s
			}()},
			err: `services.d/web443.yaml:1: service "web443" puts 10.0.0.50 on eth1, service "web" (/etc/lvsd/services.d/web.yaml:1) on eth0`},
		{name: "one gateway, two interfaces", services: []*config.Service{
			natService("web", "10.0.0.50", "", "10.0.1.1", "eth1"), natService("mail", "10.0.0.51", "", "10.0.1.1", "eth2")},
			err: `mail.yaml:1: service "mail" puts 10.0.1.1 on eth2, service "web" (/etc/lvsd/services.d/web.yaml:1) on eth1`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d, err := Build(&config.Agent{Interface: "eth0", BGP: c.bgp}, c.services)
			switch {
			case c.err != "":
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("error %v, want one containing %q", err, c.err)
				}
				return
			case err != nil:
				t.Fatal(err)
			}
			got := map[netip.Addr]map[netip.Prefix]string{}
			for _, v := range d.VIPs {
				if v.Interfaces != nil {
					got[v.VIP] = v.Interfaces
				}
			}
			if !reflect.DeepEqual(got, c.want) {
				t.Errorf("interfaces %v, want %v", got, c.want)
			}
			for _, k := range c.sysctls {
				if _, ok := d.Sysctls[k]; !ok {
					t.Errorf("sysctl %s not set: %v", k, d.Sysctls)
				}
			}
		})
	}
}

// The holder's plan adds, announces and removes each address on its own
// interface, and moves an address whose interface changed.
func TestPlanAddressesOnInterfaces(t *testing.T) {
	vip, gw := host("10.0.0.50"), host("10.0.1.1")
	twoArmed := VIPAddresses{VIP: vip.Addr(), Addresses: []netip.Prefix{vip, gw}, Interfaces: map[netip.Prefix]string{gw: "eth1"}}
	vlan := VIPAddresses{VIP: vip.Addr(), Addresses: []netip.Prefix{vip}, Interfaces: map[netip.Prefix]string{vip: "eth0.20"}}
	owned := func(a ...OwnedAddress) Ownership { return Ownership{Addresses: a} }
	cases := []struct {
		name    string
		vip     VIPAddresses
		held    bool
		owned   Ownership
		present map[string][]netip.Prefix
		want    []string
	}{
		{name: "two-armed takeover", vip: twoArmed, held: true, want: []string{
			"add-address 10.0.0.50/32 dev eth0 (VIP held)", "add-address 10.0.1.1/32 dev eth1 (VIP held)",
			"announce 10.0.0.50/32 dev eth0", "announce 10.0.1.1/32 dev eth1"}},
		{name: "two-armed release", vip: twoArmed, owned: owned(OwnedAddress{"eth0", vip}, OwnedAddress{"eth1", gw}),
			present: map[string][]netip.Prefix{"eth0": {vip}, "eth1": {gw}},
			want:    []string{"delete-address 10.0.0.50/32 dev eth0 (not held)", "delete-address 10.0.1.1/32 dev eth1 (not held)"}},
		{name: "held and there", vip: twoArmed, held: true, owned: owned(OwnedAddress{"eth0", vip}, OwnedAddress{"eth1", gw}),
			present: map[string][]netip.Prefix{"eth0": {vip}, "eth1": {gw}}},
		{name: "vlan takeover", vip: vlan, held: true, want: []string{
			"add-address 10.0.0.50/32 dev eth0.20 (VIP held)", "announce 10.0.0.50/32 dev eth0.20"}},
		{name: "interface changed", vip: vlan, held: true, owned: owned(OwnedAddress{"eth0", vip}),
			present: map[string][]netip.Prefix{"eth0": {vip}}, want: []string{
				"delete-address 10.0.0.50/32 dev eth0 (not held)", "add-address 10.0.0.50/32 dev eth0.20 (VIP held)", "announce 10.0.0.50/32 dev eth0.20"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			in := AddressInput{Interface: "eth0", VIPDevice: "eth0", VIPs: []VIPAddresses{c.vip},
				Held: map[netip.Addr]bool{vip.Addr(): c.held}, Present: c.present, Owned: c.owned, Announce: true}
			if got := OpStrings(PlanAddresses(in)); !slices.Equal(got, c.want) {
				t.Errorf("ops\n got %q\nwant %q", got, c.want)
			}
		})
	}
}

// Devices lists every device the addresses go on, once.
func TestDesiredDevices(t *testing.T) {
	d := Desired{Interface: "eth0", VIPDevice: "lo", VIPs: []VIPAddresses{
		{Interfaces: map[netip.Prefix]string{host("10.0.1.1"): "eth1"}},
		{Interfaces: map[netip.Prefix]string{host("10.0.2.1"): "eth1", host("10.0.3.1"): "eth0.30"}},
	}}
	if got, want := d.Devices(), []string{"eth0", "eth0.30", "eth1", "lo"}; !slices.Equal(got, want) {
		t.Errorf("devices %q, want %q", got, want)
	}
}
