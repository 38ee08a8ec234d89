package l4

import "testing"

// The names are what nft lists and what lvsd's status and errors print.
func TestNames(t *testing.T) {
	for p, want := range map[Protocol]string{Any: "any", TCP: "tcp", UDP: "udp", SCTP: "sctp", 50: "proto-50"} {
		if got := p.String(); got != want {
			t.Errorf("Protocol(%d) = %q, want %q", uint8(p), got, want)
		}
	}
	for r, want := range map[PortRange]string{{80, 80}: "80", {8000, 8099}: "8000-8099"} {
		if got := r.String(); got != want {
			t.Errorf("%#v = %q, want %q", r, got, want)
		}
	}
}
