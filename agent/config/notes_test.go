package config

import (
	"net/netip"
	"strings"
	"testing"
)

func TestNotes(t *testing.T) {
	vip := netip.MustParseAddr("10.0.0.50")
	for _, tc := range []struct {
		protocol string
		want     string
	}{
		{"tcp", ""},
		{"sctp", ""},
		{"any", `web.yaml:3: service "web": protocol any balances TCP, UDP and SCTP to 10.0.0.50; packets of other protocols`},
	} {
		notes := Notes([]*Service{{Name: "web", File: "web.yaml", Line: 3, VIP: vip, Protocol: tc.protocol}})
		if got := strings.Join(notes, "\n"); (tc.want == "") != (got == "") || !strings.HasPrefix(got, tc.want) {
			t.Errorf("protocol %s: notes %q, want %q", tc.protocol, got, tc.want)
		}
	}
}
