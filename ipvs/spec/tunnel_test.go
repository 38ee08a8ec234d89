package spec

import (
	"testing"
)

func TestDestinationMethod(t *testing.T) {
	for _, c := range []struct {
		d    Destination
		want string
	}{
		{Destination{Forwarding: DirectRoute}, "route"},
		{Destination{Forwarding: Masquerade}, "masq"},
		{Destination{Forwarding: Tunnel}, "tunnel"},
		{Destination{Forwarding: Tunnel, Tunnel: TunnelOptions{Type: TunnelGUE, Port: 6080}}, "tunnel/gue:6080"},
		{Destination{Forwarding: Tunnel, Tunnel: TunnelOptions{Type: TunnelGUE, Port: 6080, Flags: TunnelRemoteChecksum}}, "tunnel/gue:6080+remcsum"},
		{Destination{Forwarding: Tunnel, Tunnel: TunnelOptions{Type: TunnelGRE, Flags: TunnelChecksum}}, "tunnel/gre+csum"},
	} {
		if got := c.d.Method(); got != c.want {
			t.Errorf("%+v: %q, want %q", c.d, got, c.want)
		}
	}
}
