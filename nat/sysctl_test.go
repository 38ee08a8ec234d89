package nat

import (
	"maps"
	"os"
	"path/filepath"
	"testing"
)

func TestForwardingSysctls(t *testing.T) {
	for _, c := range []struct {
		v4, v6 bool
		want   map[string]string
	}{
		{false, false, map[string]string{}},
		{true, false, map[string]string{SysctlForwardV4: "1", "net/ipv4/conf/all/send_redirects": "0",
			"net/ipv4/conf/eth0/send_redirects": "0"}},
		{false, true, map[string]string{SysctlForwardV6: "1"}},
	} {
		if got := ForwardingSysctls(c.v4, c.v6, "eth0"); !maps.Equal(got, c.want) {
			t.Errorf("ForwardingSysctls(%v, %v) = %v, want %v", c.v4, c.v6, got, c.want)
		}
	}
}

// setSysctls writes kernel parameters of the calling thread's network
// namespace, for the datapath tests (the agent sets them through
// arp/sysctl; nat only names them).
func setSysctls(t *testing.T, kv map[string]string) {
	t.Helper()
	for k, v := range kv {
		if err := os.WriteFile(filepath.Join("/proc/sys", k), []byte(v+"\n"), 0o644); err != nil {
			t.Fatalf("setting sysctl %s=%s: %v", k, v, err)
		}
	}
}
