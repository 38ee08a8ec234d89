package agent

import (
	"errors"
	"strings"
	"testing"

	"github.com/lvsd/lvsd/agent/planner"

	"github.com/lvsd/lvsd/arp/sysctl"
	"github.com/lvsd/lvsd/ipvs"
)

// A sysctl that cannot be set says what to do, by the kind of its error:
// an IPVS key missing means the module is not loaded, a read-only one that
// the host must set it.
func TestSysctlError(t *testing.T) {
	ctx := t.Context()
	sysctls := sysctl.NewFake(map[string]string{"net/ipv4/ip_forward": "0"})
	sysctls.SetReadOnly("net/ipv4/ip_forward")
	k := Kernel{Sysctls: sysctls}
	for _, tc := range []struct {
		key, hint string
		kind      error
	}{
		{ipvs.ExpireNodestConn, "modprobe ip_vs", sysctl.ErrMissing},
		{"net/ipv4/conf/eth9/arp_ignore", "", sysctl.ErrMissing}, // no module to load: its interface is gone
		{"net/ipv4/ip_forward", "read-only /proc/sys", sysctl.ErrReadOnly},
	} {
		err := k.Apply(ctx, []planner.Op{{Kind: planner.SetSysctl, Detail: &planner.Detail{Key: tc.key, Value: "1"}}})[0]
		if !errors.Is(err, tc.kind) {
			t.Errorf("setting %s: %v, want %v", tc.key, err, tc.kind)
		}
		if hinted := strings.Contains(err.Error(), "("); hinted != (tc.hint != "") || !strings.Contains(err.Error(), tc.hint) {
			t.Errorf("setting %s: %q, want the hint %q", tc.key, err, tc.hint)
		}
	}
}
