package nat

import (
	"os"
	"path/filepath"
	"testing"
)

// setSysctls writes kernel parameters of the calling thread's network
// namespace, for the datapath tests (the agent sets them through
// arp/sysctl; nat only names them).
func setSysctls(t testing.TB, kv map[string]string) {
	t.Helper()
	for k, v := range kv {
		if err := os.WriteFile(filepath.Join("/proc/sys", k), []byte(v+"\n"), 0o644); err != nil {
			t.Fatalf("setting sysctl %s=%s: %v", k, v, err)
		}
	}
}
