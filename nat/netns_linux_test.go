package nat

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/vishvananda/netns"
)

// requireNetAdmin skips without root (the unit tier runs unprivileged) but
// never skips as root: a root run on a host without nftables must fail.
func requireNetAdmin(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root (CAP_NET_ADMIN) for a network namespace and nftables")
	}
	if _, err := exec.LookPath("nft"); err != nil {
		t.Fatalf("running as root but the nft CLI is missing (apt-get install nftables): %v", err)
	}
}

var nsSeq atomic.Int32

// testNS is a named network namespace for one test, deleted at cleanup.
type testNS struct {
	name string
	fd   int
}

func newTestNS(t testing.TB) testNS {
	t.Helper()
	name := fmt.Sprintf("lvsd-nat-%d-%d", os.Getpid(), nsSeq.Add(1))
	// netns.NewNamed moves the calling thread into the new namespace: do it
	// on a locked thread and move back before unlocking.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	orig, err := netns.Get()
	if err != nil {
		t.Fatal(err)
	}
	defer orig.Close()
	ns, err := netns.NewNamed(name)
	if err != nil {
		t.Fatalf("creating netns %s: %v", name, err)
	}
	if err := netns.Set(orig); err != nil {
		t.Fatalf("returning to the original netns: %v", err)
	}
	t.Cleanup(func() {
		ns.Close()
		if err := netns.DeleteNamed(name); err != nil {
			t.Errorf("deleting netns %s: %v", name, err)
		}
	})
	return testNS{name: name, fd: int(ns)}
}

// nft runs the nft CLI in the namespace.
func (ns testNS) nft(t testing.TB, args ...string) string {
	t.Helper()
	out, err := exec.Command("ip", append([]string{"netns", "exec", ns.name, "nft"}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("nft %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// nftStdin runs nft -f - with script on stdin.
func (ns testNS) nftStdin(t testing.TB, script string) {
	t.Helper()
	cmd := exec.Command("ip", "netns", "exec", ns.name, "nft", "-f", "-")
	cmd.Stdin = strings.NewReader(script)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("nft -f -: %v\n%s\nscript:\n%s", err, out, script)
	}
}

// lvsdTables lists both owned tables the way Ruleset.String prints them.
func (ns testNS) lvsdTables(t *testing.T) string {
	t.Helper()
	return ns.nft(t, "list", "table", "ip", TableName) + ns.nft(t, "list", "table", "ip6", TableName)
}
