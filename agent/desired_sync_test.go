package agent

import (
	"net/netip"
	"os"
	"reflect"
	"testing"

	"github.com/lvsd/lvsd/cluster/connsync"
)

// TestRelayGetsConfiguredServices: the relay applies records only of the
// services configured here, so the agent hands it every configured IPVS
// service with its real servers at start and at each reload — a firewall
// mark service by its mark, the pusher service never.
func TestRelayGetsConfiguredServices(t *testing.T) {
	e := newEnv(t)
	writeTestFile(t, e.dir+"/lvsd.yaml", "node: d1\ninterface: eth0\nservices_dir: services.d\nstate_dir: state\n"+
		"cluster: {peers: [10.0.0.3], key_file: key, conn_sync: {enabled: true}}\n")
	if err := os.WriteFile(e.dir+"/key", []byte("0123456789abcdef0123456789abcdef\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	e.service("web", "service: web\nvip: 10.0.0.50\nports: [80]\nforwarding: nat\nbackends: [{address: 10.0.0.11}, {address: 10.0.0.12, port: 8080}]\n")
	relay := &forgetfulRelay{}
	a := e.agentWith(Options{ConnSync: relay})
	a.setConfig(a.cfg, Changes{All: true})
	vip := netip.MustParseAddr("10.0.0.50")
	want := []connsync.Service{{VIP: vip, Protocol: 6, Port: 80,
		Dests: []netip.AddrPort{netip.MustParseAddrPort("10.0.0.11:80"), netip.MustParseAddrPort("10.0.0.12:8080")}}}
	if !reflect.DeepEqual(relay.services, want) {
		t.Fatalf("relay services %+v\nwant %+v", relay.services, want)
	}

	e.service("dns", "service: dns\nvip: 10.0.0.53\nports: [53]\nprotocol: udp\nbackends: [{address: 10.0.0.21}]\n")
	e.reload(a)
	if len(relay.services) != 2 {
		t.Fatalf("after a reload the relay has %d services, want 2 (web, dns): %+v", len(relay.services), relay.services)
	}
}
