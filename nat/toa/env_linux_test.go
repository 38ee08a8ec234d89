package toa

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"golang.org/x/sys/unix"
)

// requireRoot skips without root (the unit tier runs unprivileged) but never
// skips as root: a root run on a host without ip or nft must fail, and the
// file systems the programs need are mounted by the tests themselves.
func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root for BPF, network namespaces and cgroups")
	}
	for _, tool := range []string{"ip", "nft"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("running as root but %s is missing (apt-get install iproute2 nftables): %v", tool, err)
		}
	}
}

// bpfFS mounts a BPF file system of the test's own and returns a pin root
// in it.
func bpfFS(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if err := unix.Mount("bpf", dir, "bpf", 0, ""); err != nil {
		t.Fatalf("mounting a BPF file system at %s: %v", dir, err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil {
			t.Errorf("unmounting %s: %v", dir, err)
		}
	})
	return filepath.Join(dir, "lvsd", "toa")
}

var seq atomic.Int32

// cgroup mounts the cgroup v2 hierarchy at a folder of the test's own and
// makes a child cgroup for the test's server; it is removed once empty.
func cgroup(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if err := unix.Mount("cgroup2", dir, "cgroup2", 0, ""); err != nil {
		t.Fatalf("mounting cgroup2 at %s: %v", dir, err)
	}
	child := filepath.Join(dir, fmt.Sprintf("lvsd-toa-test-%d-%d", os.Getpid(), seq.Add(1)))
	if err := os.Mkdir(child, 0o755); err != nil {
		unix.Unmount(dir, unix.MNT_DETACH)
		t.Fatalf("creating cgroup %s: %v", child, err)
	}
	t.Cleanup(func() {
		if err := os.Remove(child); err != nil {
			t.Errorf("removing cgroup %s: %v", child, err)
		}
		if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil {
			t.Errorf("unmounting %s: %v", dir, err)
		}
	})
	return child
}

// run runs a command and fails the test with its output if it fails.
func run(t *testing.T, name string, args ...string) string {
	t.Helper()
	var out bytes.Buffer
	cmd := exec.Command(name, args...)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out.String())
	}
	return out.String()
}

// assertNothingPinned fails if anything is left below the pin root.
func assertNothingPinned(t *testing.T, root string) {
	t.Helper()
	var left []string
	filepath.Walk(root, func(path string, info os.FileInfo, err error) error {
		if err == nil && path != root {
			left = append(left, path)
		}
		return nil
	})
	if len(left) > 0 {
		t.Errorf("left pinned: %v", left)
	}
}
