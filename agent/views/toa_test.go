package views

import (
	"context"
	"reflect"
	"testing"

	"github.com/lvsd/lvsd/agent"
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

	plain := newEnv(t)
	plain.service("plain", "service: plain\nvip: 10.0.0.51\nports: [80]\nbackends:\n  - {address: 10.0.1.12}\n")
	pk := plain.kernel()
	pk.TOA = toa.NewFakeDirector()
	pv := plain.agentWith(agent.Options{Kernel: pk})
	plain.reconcile(pv)
	if st, err := pv.Status(context.Background(), StatusQuery{}); err != nil || st.TOA != nil {
		t.Errorf("without a TOA service: %+v, %v", st.TOA, err)
	}
}
