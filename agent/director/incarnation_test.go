package director

import (
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/lvsd/lvsd/cluster"
	"github.com/lvsd/lvsd/cluster/connsync"
)

// TestNextIncarnation: the incarnation grows with every start, also when
// the clock went back; a record that cannot be read or written gives the
// clock, and the director starts anyway.
func TestNextIncarnation(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	now := time.Unix(1_800_000_000, 0)
	clock := uint64(now.UnixNano())
	dir := t.TempDir()

	if got := nextIncarnation(dir, now, log); got != clock {
		t.Fatalf("first start: %d, want the clock %d", got, clock)
	}
	if got := nextIncarnation(dir, now.Add(time.Hour), log); got != clock+uint64(time.Hour) {
		t.Errorf("clock ahead of the record: %d, want the clock %d", got, clock+uint64(time.Hour))
	}
	back := now.Add(-2 * time.Hour)
	if got, want := nextIncarnation(dir, back, log), clock+uint64(time.Hour)+1; got != want {
		t.Errorf("clock gone back two hours: %d, want the last one plus 1, %d", got, want)
	}
	if got, want := nextIncarnation(dir, back, log), clock+uint64(time.Hour)+2; got != want {
		t.Errorf("again: %d, want %d", got, want)
	}

	path := filepath.Join(dir, incarnationFile)
	must(t, os.WriteFile(path, []byte("{not json"), 0o600))
	if got := nextIncarnation(dir, back, log); got != uint64(back.UnixNano()) {
		t.Errorf("corrupt record: %d, want the clock %d", got, uint64(back.UnixNano()))
	}
	if got, want := nextIncarnation(dir, back, log), uint64(back.UnixNano())+1; got != want {
		t.Errorf("after a corrupt record: %d, want the clock recorded then plus 1, %d", got, want)
	}

	// A state directory that cannot be written: a file stands in its way.
	blocked := filepath.Join(t.TempDir(), "file")
	must(t, os.WriteFile(blocked, nil, 0o600))
	for range 2 {
		if got := nextIncarnation(filepath.Join(blocked, "state"), back, log); got != uint64(back.UnixNano()) {
			t.Errorf("unwritable state directory: %d, want the clock %d", got, uint64(back.UnixNano()))
		}
	}
}

// TestRunPassesIncarnation: the cluster node and the relay start with the
// incarnation recorded in state_dir, and the next start's is higher even
// if the clock went back in between.
func TestRunPassesIncarnation(t *testing.T) {
	o, addrs, _ := setup(t, true)
	var node, relay []uint64
	start, newRelay := o.StartCluster, o.NewRelay
	o.StartCluster = func(c cluster.Config) (Node, error) {
		node = append(node, c.Incarnation)
		return start(c)
	}
	o.NewRelay = func(c connsync.Config) (Relay, error) {
		relay = append(relay, c.Incarnation)
		return newRelay(c)
	}
	far := uint64(time.Now().Add(24 * time.Hour).UnixNano()) // as if the clock went back a day since
	must(t, os.MkdirAll(o.Config.Agent.StateDir, 0o750))
	must(t, os.WriteFile(filepath.Join(o.Config.Agent.StateDir, incarnationFile),
		[]byte(`{"incarnation": `+strconv.FormatUint(far, 10)+`}`), 0o600))
	for range 2 {
		must(t, runUntilHeld(t, o, addrs))
	}
	if len(node) != 2 || len(relay) != 2 || node[0] != far+1 || node[1] != far+2 || relay[0] != node[0] || relay[1] != node[1] {
		t.Errorf("incarnations: node %v, relay %v; want %d then %d for both", node, relay, far+1, far+2)
	}
}
