package views

import (
	"context"
	"fmt"
	"net/netip"
	"reflect"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/lvsd/lvsd/agent"
	"github.com/lvsd/lvsd/ipvs/l4"
	"github.com/lvsd/lvsd/nat/toa"
)

// Status shows the TOA program where a service asks for it: its
// interfaces, its VIP:ports and its counters; none otherwise.
func TestStatusTOA(t *testing.T) {
	e := newEnv(t)
	e.service("web", "service: web\nvip: 10.0.0.50\nports: [443, 8443]\nforwarding: fullnat\nclient_address: toa\n"+
		"fullnat:\n  source_addresses: [10.0.1.200]\nbackends:\n  - {address: 10.0.1.11}\n")
	e.service("plain", "service: plain\nvip: 10.0.0.51\nports: [80]\nbackends:\n  - {address: 10.0.1.12}\n")
	prog := toa.NewFakeDirector()
	k := e.kernel()
	k.TOA = prog
	v := e.agentWith(agent.Options{Kernel: k})
	e.reconcile(v)
	prog.SetStats(toa.DirectorStats{Added: 50, NoRoom: 1, Stripped: 2, Unsupported: 3})
	st, err := v.Status(context.Background(), StatusQuery{})
	if err != nil {
		t.Fatal(err)
	}
	want := &agent.TOAStatus{Interfaces: []string{"eth0"}, Services: []string{"10.0.0.50:443", "10.0.0.50:8443"},
		Added: 50, NoRoom: 1, Stripped: 2, Unsupported: 3}
	if !reflect.DeepEqual(st.TOA, want) {
		t.Errorf("toa %+v, want %+v", st.TOA, want)
	}
	if err := testutil.CollectAndCompare(NewCollector(v, "dev"), strings.NewReader(`
# HELP lvsd_toa_forged_stripped_total Packets from clients that carried a TOA option of their own (a forged address), overwritten before they reach the real servers.
# TYPE lvsd_toa_forged_stripped_total counter
lvsd_toa_forged_stripped_total 2
# HELP lvsd_toa_interfaces Interfaces that carry the director's TOA program.
# TYPE lvsd_toa_interfaces gauge
lvsd_toa_interfaces 1
# HELP lvsd_toa_no_room_total SYNs whose TCP options left no room for the client's address: passed without it, so the real server sees the director's address.
# TYPE lvsd_toa_no_room_total counter
lvsd_toa_no_room_total 1
# HELP lvsd_toa_options_added_total SYNs to a VIP:port with client_address toa that the director's TOA program gave the client's address and port.
# TYPE lvsd_toa_options_added_total counter
lvsd_toa_options_added_total 50
# HELP lvsd_toa_unsupported_total SYNs passed without the client's address: IPv4 options, data in the SYN, a helper that failed.
# TYPE lvsd_toa_unsupported_total counter
lvsd_toa_unsupported_total 3
`), "lvsd_toa_forged_stripped_total", "lvsd_toa_interfaces", "lvsd_toa_no_room_total", "lvsd_toa_options_added_total",
		"lvsd_toa_unsupported_total"); err != nil {
		t.Error(err)
	}

	plain := newEnv(t)
	plain.service("plain", "service: plain\nvip: 10.0.0.51\nports: [80]\nbackends:\n  - {address: 10.0.1.12}\n")
	pk := plain.kernel()
	pk.TOA = toa.NewFakeDirector()
	pv := plain.agentWith(agent.Options{Kernel: pk})
	plain.reconcile(pv)
	if st, err := pv.Status(context.Background(), StatusQuery{}); err != nil || st.TOA != nil {
		t.Errorf("without a TOA service: %+v, %v", st.TOA, err)
	}
	if n := testutil.CollectAndCount(NewCollector(pv, "dev"), "lvsd_toa_options_added_total", "lvsd_toa_interfaces"); n != 0 {
		t.Errorf("without a TOA service: %d TOA series", n)
	}
}

// Explain says how the client's address reaches the real server: through
// TOA for a service with client_address toa, replaced by the director's
// for plain FULLNAT, as sent for DR.
func TestExplainClientAddress(t *testing.T) {
	e := newEnv(t)
	fullnat := "vip: %s\nports: [443]\nforwarding: fullnat\nfullnat:\n  source_addresses: [%s]\nbackends:\n  - {address: 10.0.1.11}\n"
	e.service("toa", "service: toa\nclient_address: toa\n"+fmt.Sprintf(fullnat, "10.0.0.50", "10.0.1.200"))
	e.service("snat", "service: snat\n"+fmt.Sprintf(fullnat, "10.0.0.51", "10.0.1.201"))
	e.service("dr", "service: dr\nvip: 10.0.0.52\nports: [443]\nbackends:\n  - {address: 10.0.0.11}\n")
	k := e.kernel()
	k.TOA = toa.NewFakeDirector()
	v := e.agentWith(agent.Options{Kernel: k})
	e.reconcile(v)
	client := netip.MustParseAddrPort("192.0.2.7:40000")
	for _, c := range []struct{ vip, want string }{
		{"10.0.0.50:443", "the real server's applications see 192.0.2.7:40000: the director's TOA program on eth0 adds"},
		{"10.0.0.51:443", "the real server sees a source address of the director (FULLNAT), not 192.0.2.7:40000"},
		{"10.0.0.52:443", "the real server sees 192.0.2.7:40000 (the packet arrives as the client sent it)"},
	} {
		x, err := v.Explain(context.Background(), ExplainQuery{Client: client, Virtual: netip.MustParseAddrPort(c.vip), Protocol: l4.TCP})
		if err != nil || !strings.HasPrefix(x.ClientAddress, c.want) {
			t.Errorf("%s: %q, %v; want it to start %q", c.vip, x.ClientAddress, err, c.want)
		}
	}
}
