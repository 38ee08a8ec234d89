package main

import (
	"net/netip"
	"reflect"
	"testing"

	"github.com/lvsd/lvsd/agent"
	"github.com/lvsd/lvsd/cluster/connsync"
	"github.com/lvsd/lvsd/ipvs"
)

func TestSyncServices(t *testing.T) {
	vip := netip.MustParseAddr("192.0.2.10")
	dst := func(a string, port uint16) ipvs.Destination {
		return ipvs.Destination{DestinationKey: ipvs.DestinationKey{Addr: netip.MustParseAddr(a), Port: port}}
	}
	d := agent.Desired{Services: []agent.VirtualService{
		{Service: ipvs.Service{ServiceKey: ipvs.ServiceKey{Protocol: ipvs.TCP, Addr: vip, Port: 80}}, VIP: vip,
			Destinations: []ipvs.Destination{dst("10.0.0.5", 80), dst("10.0.0.6", 8080)}},
		{Service: ipvs.Service{ServiceKey: ipvs.ServiceKey{FWMark: 0x10000001}}, VIP: vip,
			Destinations: []ipvs.Destination{dst("10.0.0.5", 0)}},
	}}
	want := []connsync.Service{
		{VIP: vip, Protocol: 6, Port: 80, Dests: []netip.AddrPort{netip.MustParseAddrPort("10.0.0.5:80"), netip.MustParseAddrPort("10.0.0.6:8080")}},
		{VIP: vip, FWMark: 0x10000001, Dests: []netip.AddrPort{netip.MustParseAddrPort("10.0.0.5:0")}},
	}
	if got := syncServices(d); !reflect.DeepEqual(got, want) {
		t.Errorf("got %+v\nwant %+v", got, want)
	}
}
