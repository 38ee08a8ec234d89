package views

import (
	"context"
	"errors"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/lvsd/lvsd/agent/maglev"
	"github.com/lvsd/lvsd/ipvs"
	"github.com/lvsd/lvsd/ipvs/l4"
)

// Explain names the destination the Maglev table gives a flow, from the
// kernel's list; an existing connection entry wins; a flow no service
// takes is an error that says so.
func TestExplain(t *testing.T) {
	e := newEnv(t)
	e.service("web", "service: web\nvip: 10.0.0.50\nports: [80]\nbackends:\n  - {address: 10.0.0.11, weight: 1}\n"+
		"  - {address: 10.0.0.12, weight: 3}\n")
	a := e.agent()
	e.reconcile(a)
	ctx := context.Background()
	vip := netip.MustParseAddrPort("10.0.0.50:80")
	svc := ipvs.ServiceKey{Protocol: l4.TCP, Addr: vip.Addr(), Port: 80}
	kernel, err := e.ipvs.Destinations(ctx, svc)
	if err != nil {
		t.Fatal(err)
	}
	var mds []maglev.Destination
	for _, d := range kernel {
		mds = append(mds, maglev.Destination{Addr: d.Addr, Port: d.Port, Weight: d.Weight, LastWeight: d.Weight})
	}
	table := maglev.New(mds)

	for port := uint16(40000); port < 40050; port++ {
		client := netip.AddrPortFrom(netip.MustParseAddr("192.0.2.7"), port)
		x, err := a.Explain(ctx, ExplainQuery{Client: client, Virtual: vip, Protocol: l4.TCP})
		if err != nil {
			t.Fatal(err)
		}
		want := table.Pick(client.Addr(), port, true)
		wantBackend := ipvs.DestinationKey{Addr: mds[want.Dest].Addr, Port: 80}.String()
		if x.Decided != "maglev" || x.Backend != wantBackend ||
			x.Slot != want.Slot || !x.HashesPort || x.Service != "web" {
			t.Fatalf("%s: %+v, want maglev to %s slot %d", client, x, mds[want.Dest].Addr, want.Slot)
		}
	}
	x, _ := a.Explain(ctx, ExplainQuery{Client: netip.MustParseAddrPort("192.0.2.7:40000"), Virtual: vip, Protocol: l4.TCP})
	if len(x.Destinations) != 2 || x.Destinations[0].Slots+x.Destinations[1].Slots != maglev.TableSize {
		t.Errorf("destinations %+v: want both, holding every slot", x.Destinations)
	}

	// An entry of the client's connection decides.
	client := netip.MustParseAddrPort("192.0.2.7:40000")
	other := "10.0.0.11:80"
	if x.Backend == other {
		other = "10.0.0.12:80"
	}
	e.conns.Set([]ipvs.Connection{{Protocol: l4.TCP, Client: client, Virtual: vip, Dest: netip.MustParseAddrPort(other),
		State: "ESTABLISHED", Expires: 900 * time.Second}}, nil)
	x, err = a.Explain(ctx, ExplainQuery{Client: client, Virtual: vip, Protocol: l4.TCP})
	if err != nil || x.Decided != "connection" || x.Backend != other || x.Connection.Expires != 900 {
		t.Errorf("with a connection entry: %+v, %v; want it to decide", x, err)
	}

	_, err = a.Explain(ctx, ExplainQuery{Client: client, Virtual: netip.MustParseAddrPort("10.0.0.50:81"), Protocol: l4.TCP})
	if !errors.Is(err, errNoService) {
		t.Errorf("port 81: %v, want %v", err, errNoService)
	}
}

// A firewall-mark service is named, not passed off as no service.
func TestExplainFirewallMark(t *testing.T) {
	e := newEnv(t)
	e.service("web", "service: web\nvip: 10.0.0.50\nports: [\"8000-8010\"]\nbackends: [{address: 10.0.0.11}]\n")
	a := e.agent()
	e.reconcile(a)
	_, err := a.Explain(context.Background(), ExplainQuery{Client: netip.MustParseAddrPort("192.0.2.7:40000"),
		Virtual: netip.MustParseAddrPort("10.0.0.50:8005"), Protocol: l4.TCP})
	if err == nil || !strings.Contains(err.Error(), "service web is a firewall-mark service (fwmark:") {
		t.Errorf("got %v, want it to name the firewall-mark service", err)
	}
}

func TestParseExplainQuery(t *testing.T) {
	for _, tc := range []struct{ client, virtual, proto, want string }{
		{"192.0.2.7:51000", "10.0.0.50:443", "", ""},
		{"192.0.2.7", "10.0.0.50:443", "udp", ""},
		{"[2001:db8::7]:51000", "[fd00::50]:443", "sctp", ""},
		{"192.0.2.7:x", "10.0.0.50:443", "", `client "192.0.2.7:x" is not an address or address:port`},
		{"192.0.2.7", "10.0.0.50", "", `"10.0.0.50" is not VIP:PORT`},
		{"192.0.2.7", "10.0.0.50:443", "icmp", `protocol "icmp" is not tcp, udp or sctp`},
	} {
		q, err := ParseExplainQuery(tc.client, tc.virtual, tc.proto)
		if got := ""; err != nil {
			got = err.Error()
			if got != tc.want {
				t.Errorf("%q %q %q: error %q, want %q", tc.client, tc.virtual, tc.proto, got, tc.want)
			}
			continue
		}
		if tc.want != "" {
			t.Errorf("%q %q %q: %+v, want error %q", tc.client, tc.virtual, tc.proto, q, tc.want)
			continue
		}
		values := ExplainValues(q)
		back, err := ParseExplainQuery(values.Get("client"), values.Get("virtual"), values.Get("protocol"))
		if err != nil || back != q {
			t.Errorf("%+v through %v: %+v, %v", q, values, back, err)
		}
	}
}
