package ipvs

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// fakeProcSys points procSys at a directory holding net/ipv4/vs with the
// given files and records the writes.
func fakeProcSys(t *testing.T, files map[string]string) (dir string, writes *[]string) {
	t.Helper()
	dir = t.TempDir()
	vs := filepath.Join(dir, "net/ipv4/vs")
	if err := os.MkdirAll(vs, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, v := range files {
		if err := os.WriteFile(filepath.Join(vs, name), []byte(v), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	oldDir, oldWrite := procSys, writeSysctl
	t.Cleanup(func() { procSys, writeSysctl = oldDir, oldWrite })
	procSys, writes = dir, new([]string)
	writeSysctl = func(path string, b []byte) error {
		rel, _ := filepath.Rel(vs, path)
		*writes = append(*writes, rel+"="+string(b))
		return os.WriteFile(path, b, 0o644)
	}
	return dir, writes
}

// kernelDefaults is net/ipv4/vs as a fresh namespace prints it.
var kernelDefaults = map[string]string{
	"sync_version": "1\n", "sync_ports": "1\n", "sync_threshold": "3\t50\n", "sync_refresh_period": "0\n",
	"sync_persist_mode": "0\n", "sloppy_tcp": "0\n", "sloppy_sctp": "0\n",
}

func TestApplySyncSysctls(t *testing.T) {
	ctx := context.Background()
	dir, writes := fakeProcSys(t, kernelDefaults)
	if err := ApplySyncSysctls(ctx, RecommendedSyncSysctls()); err != nil {
		t.Fatal(err)
	}
	// Values already in place (tab-separated vectors included) are not written.
	want := []string{"sync_threshold=3 0\n", "sync_refresh_period=10\n", "sloppy_tcp=1\n", "sloppy_sctp=1\n"}
	if !slices.Equal(*writes, want) {
		t.Errorf("writes:\n got %q\nwant %q", *writes, want)
	}
	*writes = nil
	// As the kernel prints them back: a second run writes nothing.
	if err := os.WriteFile(filepath.Join(dir, "net/ipv4/vs/sync_threshold"), []byte("3\t0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := ApplySyncSysctls(ctx, RecommendedSyncSysctls()); err != nil || len(*writes) != 0 {
		t.Errorf("second apply: err %v, writes %q", err, *writes)
	}
}

func TestApplySyncSysctlsErrors(t *testing.T) {
	ctx := context.Background()
	fakeProcSys(t, nil)
	if err := ApplySyncSysctls(ctx, RecommendedSyncSysctls()); !errors.Is(err, ErrNotAvailable) {
		t.Errorf("without ip_vs: got %v, want ErrNotAvailable", err)
	}
	for _, s := range []SyncSysctls{{Threshold: 50, Period: 50}, {Threshold: -1}, {RefreshPeriod: -1}} {
		if err := ApplySyncSysctls(ctx, s); err == nil {
			t.Errorf("%+v: want an error", s)
		}
	}
	// A vector the kernel would take: threshold above a zero period.
	fakeProcSys(t, kernelDefaults)
	if err := ApplySyncSysctls(ctx, SyncSysctls{Threshold: 7, Period: 0}); err != nil {
		t.Error(err)
	}
}
