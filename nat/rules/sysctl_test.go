package rules_test

import (
	"maps"
	"testing"

	"github.com/lvsd/lvsd/nat/rules"
)

func TestForwardingSysctls(t *testing.T) {
	for _, c := range []struct {
		v4, v6 bool
		want   map[string]string
	}{
		{false, false, map[string]string{}},
		{true, false, map[string]string{rules.SysctlForwardV4: "1", "net/ipv4/conf/all/send_redirects": "0",
			"net/ipv4/conf/eth0/send_redirects": "0"}},
		{false, true, map[string]string{rules.SysctlForwardV6: "1"}},
	} {
		if got := rules.ForwardingSysctls(c.v4, c.v6, "eth0"); !maps.Equal(got, c.want) {
			t.Errorf("ForwardingSysctls(%v, %v) = %v, want %v", c.v4, c.v6, got, c.want)
		}
	}
}
