package agent

import (
	"context"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lvsd/lvsd/ipvs"
	"github.com/lvsd/lvsd/ipvs/l4"
)

// What someone else changes behind lvsd's back is corrected by the
// rotating audit, not by every pass: a service deleted at its first step
// (the table dump), a destination deleted at the step that reads its
// service back.
func TestAuditCorrectsDrift(t *testing.T) {
	e := newEnv(t)
	e.bulkServices(40, "{address: 10.0.0.11}, {address: 10.0.0.12}")
	a := e.agent()
	e.reconcile(a)
	key := func(port uint16) ipvs.ServiceKey {
		return ipvs.ServiceKey{Protocol: l4.TCP, Addr: netip.MustParseAddr("10.0.1.1"), Port: port}
	}
	ctx := context.Background()
	if err := e.ipvs.DeleteService(ctx, key(1007)); err != nil {
		t.Fatal(err)
	}
	dst := ipvs.DestinationKey{Addr: netip.MustParseAddr("10.0.0.12"), Port: 1005}
	if err := e.ipvs.DeleteDestination(ctx, key(1005), dst); err != nil {
		t.Fatal(err)
	}
	e.ipvs.Ops()

	if got := e.reconcile(a); len(got) != 0 {
		t.Fatalf("before the audit is due: %q", got)
	}
	e.now = e.now.Add(a.opts.Resync)
	got := e.reconcile(a)
	if !slices.Contains(got, "add-service tcp:10.0.1.1:1007 mh flags=mh-fallback,mh-port") || slices.ContainsFunc(got, func(op string) bool {
		return strings.Contains(op, ":1005 ")
	}) {
		t.Fatalf("first step (table dump): %q", got)
	}
	var later []string
	for range 3 {
		e.now = e.now.Add(a.opts.Resync)
		later = append(later, e.reconcile(a)...)
	}
	want := []string{"add-destination tcp:10.0.1.1:1005 10.0.0.12:1005 weight=1 route"}
	if !slices.Equal(later, want) {
		t.Fatalf("later steps: got %q, want %q", later, want)
	}
}

// A step reads back the chunk its measured cost allows, not the whole
// table, and a cycle reads every service.
func TestAuditStepIsBounded(t *testing.T) {
	e := newEnv(t)
	n := 2500
	e.bulkServices(n, "{address: 10.0.0.11}")
	a := e.agent()
	e.reconcile(a)
	counting := &countingIPVS{Interface: e.ipvs}
	a.opts.Kernel.IPVS = counting
	// As if one service's read-back were measured at 150 µs: a step may
	// spend 0.5 % of 30 s on 1,000 of them.
	a.opts.Resync = 30 * time.Second
	a.audit.perRead = 150 * time.Microsecond
	total := 0
	for step := range 4 { // the table dump, then three chunks
		e.now = e.now.Add(a.opts.Resync)
		counting.dumps = 0
		e.reconcile(a)
		if counting.dumps > 1000 {
			t.Fatalf("step %d read %d services' destinations back, more than 1,000", step, counting.dumps)
		}
		total += counting.dumps
	}
	if total < n {
		t.Errorf("a cycle read %d of %d services back", total, n)
	}
}
