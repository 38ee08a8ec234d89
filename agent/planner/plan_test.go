package planner

import (
	"slices"
	"testing"
)

// Sysctls are set only where the value differs (the kernel prints vectors
// tab-separated), in key order; a missing one is planned and says so.
func TestPlanSysctls(t *testing.T) {
	d := Desired{Sysctls: map[string]string{"net/ipv4/vs/sync_threshold": "3 0", "net/ipv4/ip_forward": "1", "net/ipv4/vs/conntrack": "1"}}
	a := Actual{Sysctls: map[string]string{"net/ipv4/vs/sync_threshold": "3\t0", "net/ipv4/ip_forward": "0"}}
	want := []string{"set-sysctl net/ipv4/ip_forward=1 (was 0)", "set-sysctl net/ipv4/vs/conntrack=1 (was missing)"}
	if got := OpStrings(planSysctls(d, a)); !slices.Equal(got, want) {
		t.Errorf("got %q, want %q", got, want)
	}
}
