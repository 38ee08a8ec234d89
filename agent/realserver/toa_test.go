package realserver

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/netip"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/lvsd/lvsd/nat/toa"
)

const toaBlock = "  client_address:\n    mode: toa\n    directors: [10.0.1.200, 10.0.1.201]\n    backends: [10.0.1.11:443]\n"

// The real server's programs follow its client_address block: set up at
// the first pass (maps, then the cgroup), left alone while it stays, given
// the new sets on a change, removed with the block.
func TestRealServerTOA(t *testing.T) {
	e := newEnv(t, toaBlock)
	a := e.agent()
	e.pass(a)
	cg, vips, directors, _ := e.toa.State()
	want := []netip.Addr{netip.MustParseAddr("10.0.1.200"), netip.MustParseAddr("10.0.1.201")}
	if cg != "/sys/fs/cgroup" || !slices.Equal(vips, []netip.AddrPort{netip.MustParseAddrPort("10.0.1.11:443")}) || !slices.Equal(directors, want) {
		t.Fatalf("after the first pass: %q %v %v", cg, vips, directors)
	}

	// Unchanged: no call (a failing call would show).
	e.toa.FailNext(errors.New("called"))
	e.pass(a)
	if a.passErr != nil {
		t.Fatalf("a pass with nothing to do called the programs: %v", a.passErr)
	}
	e.toa.FailNext(nil)

	e.write(toaBlock + "    cgroup: /sys/fs/cgroup/system.slice\n")
	if err := a.reload("test"); err != nil {
		t.Fatal(err)
	}
	e.pass(a)
	if cg, _, _, _ := e.toa.State(); cg != "/sys/fs/cgroup/system.slice" {
		t.Errorf("cgroup after the change %q", cg)
	}

	e.write("  vips: []\n")
	if err := a.reload("test"); err != nil {
		t.Fatal(err)
	}
	e.pass(a)
	if _, _, _, removed := e.toa.State(); !removed || e.toa.Pinned() {
		t.Errorf("block gone: removed %v, pinned %v", removed, e.toa.Pinned())
	}
}

// A failure is in the status and retried at the next pass; the status
// carries the counters.
func TestRealServerTOAFailureAndStatus(t *testing.T) {
	e := newEnv(t, toaBlock)
	a := e.agent()
	e.toa.FailNext(errors.New("no BPF file system"))
	e.pass(a)
	_, body := getStatus(t, a)
	if body.TOA == nil || body.TOA.Error == "" {
		t.Fatalf("status after a failure: %+v", body.TOA)
	}
	e.pass(a)
	e.toa.SetStats(toa.RealServerStats{Stored: 50, NotDirector: 1, NoOption: 2, NoSYN: 3})
	_, body = getStatus(t, a)
	want := &TOAStatus{Cgroup: "/sys/fs/cgroup", Backends: []string{"10.0.1.11:443"}, Directors: []string{"10.0.1.200", "10.0.1.201"},
		Stored: 50, NotDirector: 1, NoOption: 2, NoSYN: 3}
	if !reflect.DeepEqual(body.TOA, want) {
		t.Errorf("status %+v, want %+v", body.TOA, want)
	}
}

// lvsd cleanup removes the programs even though the record knows nothing
// of them.
func TestCleanupRemovesTOA(t *testing.T) {
	e := newEnv(t, toaBlock)
	e.pass(e.agent())
	ops, err := Cleanup(context.Background(), e.host(), filepath.Join(e.dir, "state"))
	if err != nil || !slices.Contains(opStrings(ops), "toa-remove") || e.toa.Pinned() {
		t.Errorf("cleanup: %q, %v, pinned %v", opStrings(ops), err, e.toa.Pinned())
	}
}

func getStatus(t *testing.T, a *Agent) (int, Status) {
	t.Helper()
	code, _, body := get(t, a.APIHandler(), RouteStatus)
	var st Status
	if err := json.Unmarshal([]byte(body), &st); err != nil {
		t.Fatalf("%d %s: %v", code, body, err)
	}
	return code, st
}

// Programs that could not be set up make the weight endpoint answer 503
// with weight 0, so the directors stop sending connections whose client
// address the applications would not see; the next good pass heals it.
func TestRealServerTOAFailureIsUnhealthy(t *testing.T) {
	e := newEnv(t, toaBlock)
	a := e.agent()
	h := a.HealthHandler()
	e.toa.FailNext(errors.New("no BPF file system"))
	e.pass(a)
	code, weight, body := get(t, h, "/healthz")
	if code != http.StatusServiceUnavailable || weight != "0" || !strings.Contains(body, toaProblem) {
		t.Errorf("after a failed attach: %d weight %q %q", code, weight, body)
	}
	if err := testutil.CollectAndCompare(NewCollector(a, "x"), strings.NewReader(`
# HELP lvsd_realserver_toa_in_place 1 if the TOA programs of realserver.client_address are set up; 0: the last pass failed, the weight endpoint answers 503 and applications see the directors' address.
# TYPE lvsd_realserver_toa_in_place gauge
lvsd_realserver_toa_in_place 0
`), "lvsd_realserver_toa_in_place"); err != nil {
		t.Error(err)
	}

	e.pass(a)
	e.toa.SetStats(toa.RealServerStats{Stored: 50, NotDirector: 1, NoOption: 2, NoSYN: 3})
	if code, weight, body := get(t, h, "/healthz"); code != http.StatusOK || weight == "0" {
		t.Errorf("after a good pass: %d weight %q %q", code, weight, body)
	}
	if err := testutil.CollectAndCompare(NewCollector(a, "x"), strings.NewReader(`
# HELP lvsd_realserver_healthy 1 if the weight endpoint answers 200: every VIP on lo, the tunnels decapsulating, the local checks passing and the TOA programs in place.
# TYPE lvsd_realserver_healthy gauge
lvsd_realserver_healthy 1
# HELP lvsd_realserver_toa_in_place 1 if the TOA programs of realserver.client_address are set up; 0: the last pass failed, the weight endpoint answers 503 and applications see the directors' address.
# TYPE lvsd_realserver_toa_in_place gauge
lvsd_realserver_toa_in_place 1
# HELP lvsd_realserver_toa_no_option_total Connections from a director whose SYN carried no usable TOA option: the peer name stays the director's.
# TYPE lvsd_realserver_toa_no_option_total counter
lvsd_realserver_toa_no_option_total 2
# HELP lvsd_realserver_toa_no_saved_syn_total Connections whose listener did not keep its SYN (opened before the programs were attached): restart the application.
# TYPE lvsd_realserver_toa_no_saved_syn_total counter
lvsd_realserver_toa_no_saved_syn_total 3
# HELP lvsd_realserver_toa_not_director_total Connections to a backend from an address that is not a director's: left as they are.
# TYPE lvsd_realserver_toa_not_director_total counter
lvsd_realserver_toa_not_director_total 1
# HELP lvsd_realserver_toa_stored_total Connections to a backend whose peer name is the client's address and port, taken from the director's TCP option.
# TYPE lvsd_realserver_toa_stored_total counter
lvsd_realserver_toa_stored_total 50
`), "lvsd_realserver_healthy", "lvsd_realserver_toa_in_place", "lvsd_realserver_toa_stored_total", "lvsd_realserver_toa_not_director_total",
		"lvsd_realserver_toa_no_option_total", "lvsd_realserver_toa_no_saved_syn_total"); err != nil {
		t.Error(err)
	}
}
