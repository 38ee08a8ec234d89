package realserver

import (
	"context"
	"encoding/json"
	"errors"
	"net/netip"
	"path/filepath"
	"reflect"
	"slices"
	"testing"

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
