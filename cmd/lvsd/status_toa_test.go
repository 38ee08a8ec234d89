package main

import (
	"strings"
	"testing"

	"github.com/lvsd/lvsd/agent"
	"github.com/lvsd/lvsd/agent/realserver"
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

func TestWriteRealServerStatusTOA(t *testing.T) {
	st := realServerStatus()
	st.Checks = nil
	st.TOA = &realserver.TOAStatus{Cgroup: "/sys/fs/cgroup", Backends: []string{"10.0.1.11:443"}, Directors: []string{"10.0.1.200", "10.0.1.201"},
		Error: "no BPF file system", Stored: 50, NotDirector: 1, NoOption: 2, NoSYN: 3}
	var b strings.Builder
	if err := writeRealServerStatus(&b, st, statusNow); err != nil {
		t.Fatal(err)
	}
	want := "\nclient address (toa): cgroup /sys/fs/cgroup, backends 10.0.1.11:443, directors 10.0.1.200 10.0.1.201\n" +
		"  NOT IN PLACE: no BPF file system\n" +
		"  50 connections with the client's address, 1 from other sources, 2 directors' SYNs without the option, 3 without a saved SYN\n"
	if !strings.HasSuffix(b.String(), want) {
		t.Errorf("got\n%s\nwant it to end\n%s", b.String(), want)
	}
}
