package main

import (
	"strings"
	"testing"

	"github.com/lvsd/lvsd/agent"
)

func TestWriteTOAStatus(t *testing.T) {
	for _, c := range []struct {
		st   agent.TOAStatus
		want string
	}{
		{agent.TOAStatus{Interfaces: []string{"eth0", "eth1"}, Services: []string{"10.0.0.50:443", "[fd00::50]:443"}, Added: 1200, NoRoom: 1, Stripped: 3, Unsupported: 2},
			"client address (toa): on eth0, eth1, 2 VIP:ports, 1200 options added, 1 SYNs without room, 3 forged options stripped, 2 unsupported SYNs\n\n"},
		{agent.TOAStatus{}, "client address (toa): attached nowhere, 0 VIP:ports, 0 options added, 0 SYNs without room, 0 forged options stripped, 0 unsupported SYNs\n\n"},
	} {
		var b strings.Builder
		writeTOAStatus(&b, &c.st)
		if b.String() != c.want {
			t.Errorf("got  %q\nwant %q", b.String(), c.want)
		}
	}
}
