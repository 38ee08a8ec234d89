package nat

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

func fakeProcSys(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for k, v := range files {
		p := filepath.Join(dir, k)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(v), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	old := procSys
	procSys = dir
	t.Cleanup(func() { procSys = old })
	return dir
}

func readSysctl(t *testing.T, dir, key string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, key))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestEnableForwarding(t *testing.T) {
	ctx := context.Background()
	dir := fakeProcSys(t, map[string]string{
		"net/ipv4/ip_forward":          "0\n",
		"net/ipv6/conf/all/forwarding": "0\n",
	})
	if err := EnableForwarding(ctx, true, false); err != nil {
		t.Fatal(err)
	}
	if v4, v6 := readSysctl(t, dir, "net/ipv4/ip_forward"), readSysctl(t, dir, "net/ipv6/conf/all/forwarding"); v4 != "1\n" || v6 != "0\n" {
		t.Errorf("after EnableForwarding(v4 only): ip_forward=%q ipv6 forwarding=%q", v4, v6)
	}
	if err := EnableForwarding(ctx, true, true); err != nil {
		t.Fatal(err)
	}
	if v6 := readSysctl(t, dir, "net/ipv6/conf/all/forwarding"); v6 != "1\n" {
		t.Errorf("ipv6 forwarding=%q", v6)
	}
}

func TestSysctlAlreadySetIsNotWritten(t *testing.T) {
	dir := fakeProcSys(t, map[string]string{"net/ipv4/vs/conntrack": "1\n"})
	// A read-only file that already holds the value must not be an error.
	if err := os.Chmod(filepath.Join(dir, "net/ipv4/vs/conntrack"), 0o444); err != nil {
		t.Fatal(err)
	}
	if os.Geteuid() == 0 {
		t.Log("root ignores file modes: this only checks the value")
	}
	if err := EnableIPVSConntrack(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func TestEnableIPVSConntrackWithoutIPVS(t *testing.T) {
	fakeProcSys(t, nil)
	err := EnableIPVSConntrack(context.Background())
	if !errors.Is(err, ErrNotSupported) {
		t.Errorf("EnableIPVSConntrack without ip_vs: %v, want ErrNotSupported", err)
	}
}
