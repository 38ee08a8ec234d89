package main

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"github.com/lvsd/lvsd/agent/views"
)

func TestWriteVRRPStatus(t *testing.T) {
	tests := []struct {
		name    string
		routers []views.VRRPRouterStatus
		want    string
	}{
		{name: "backup of a master heard, master of the other family, drops",
			routers: []views.VRRPRouterStatus{
				{Family: "ipv4", VRID: 51, State: "backup", Priority: 100, Master: "192.0.2.11", AdvertInterval: 1, BecameMaster: 2,
					Dropped: map[string]uint64{"another virtual router ID": 7, "bad checksum": 2}},
				{Family: "ipv6", VRID: 51, State: "master", Priority: 100, AdvertInterval: 0.25, BecameMaster: 1},
			},
			want: `vrrp: master of 1 of 2 virtual routers
  FAMILY  VRID  STATE   PRIORITY  MASTER         ADVERT  BECAME MASTER
  ipv4    51    backup  100       192.0.2.11     1s      2
  ipv6    51    master  100       this director  250ms   1
  ipv4 VRID 51 dropped 9 packets: 7 another virtual router ID, 2 bad checksum

`},
		{name: "a backup that heard no master yet, a router serving nothing",
			routers: []views.VRRPRouterStatus{
				{Family: "ipv4", VRID: 7, State: "backup", Priority: 150, AdvertInterval: 1},
				{Family: "ipv6", VRID: 7, State: "initialize", Priority: 150, AdvertInterval: 1},
			},
			want: `vrrp: master of 0 of 2 virtual routers
  FAMILY  VRID  STATE       PRIORITY  MASTER          ADVERT  BECAME MASTER
  ipv4    7     backup      150       none heard yet  1s      0
  ipv6    7     initialize  150       -               1s      0

`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var b bytes.Buffer
			if err := writeVRRPStatus(&b, tt.routers); err != nil {
				t.Fatal(err)
			}
			if b.String() != tt.want {
				t.Errorf("got:\n%s\nwant:\n%s", b.String(), tt.want)
			}
		})
	}
}

func TestWriteConfigSyncStatus(t *testing.T) {
	many := map[string]string{}
	for i := range maxSyncProblemsShown + 3 {
		many[fmt.Sprintf("s%02d.yaml", i)] = "lb1:/etc/lvsd/services.d/s.yaml:1:1: bad"
	}
	tests := []struct {
		name string
		s    views.ConfigSyncStatus
		want string
	}{
		{name: "in step", s: views.ConfigSyncStatus{Records: 4, Published: 1, Digest: "0123456789abcdef"},
			want: "config sync: in step, 4 files (1 published here, 3 received), digest 01234567, none refused or in conflict\n\n"},
		{name: "a refused file and a conflict", s: views.ConfigSyncStatus{Records: 3, Digest: "ab",
			Refused:   map[string]string{"bad.yaml": "lb1:/etc/lvsd/services.d/bad.yaml:3:10: ports: not a number"},
			Conflicts: map[string]string{"web.yaml": "a local file of this director overrides lb1's publication; it is left as it is"}},
			want: `config sync: 1 REFUSED, 1 IN CONFLICT; 3 files (0 published here, 3 received), digest ab
  refused bad.yaml: lb1:/etc/lvsd/services.d/bad.yaml:3:10: ports: not a number
  conflict over web.yaml: a local file of this director overrides lb1's publication; it is left as it is

`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var b bytes.Buffer
			if err := writeConfigSyncStatus(&b, &tt.s); err != nil {
				t.Fatal(err)
			}
			if b.String() != tt.want {
				t.Errorf("got:\n%s\nwant:\n%s", b.String(), tt.want)
			}
		})
	}
	t.Run("many refused: the first are listed", func(t *testing.T) {
		var b bytes.Buffer
		if err := writeConfigSyncStatus(&b, &views.ConfigSyncStatus{Records: 30, Refused: many}); err != nil {
			t.Fatal(err)
		}
		if got := strings.Count(b.String(), "\n  refused "); got != maxSyncProblemsShown {
			t.Errorf("%d files listed, want %d:\n%s", got, maxSyncProblemsShown, b.String())
		}
		if !strings.Contains(b.String(), "  and 3 more (lvsd status --json)\n") {
			t.Errorf("no line for the rest:\n%s", b.String())
		}
	})
}

// The director's status shows the VRRP routers and config sync before the
// services.
func TestWriteDirectorStatusVRRP(t *testing.T) {
	st := directorStatus()
	st.Services = nil
	st.VRRP = []views.VRRPRouterStatus{{Family: "ipv4", VRID: 51, State: "master", Priority: 150, AdvertInterval: 1}}
	st.ConfigSync = &views.ConfigSyncStatus{Records: 1, Published: 1, Digest: "ab"}
	var b bytes.Buffer
	if err := writeDirectorStatus(&b, st, columnsState, statusNow); err != nil {
		t.Fatal(err)
	}
	want := `vrrp: master of 1 of 1 virtual routers
  FAMILY  VRID  STATE   PRIORITY  MASTER         ADVERT  BECAME MASTER
  ipv4    51    master  150       this director  1s      0

config sync: in step, 1 file (1 published here, 0 received), digest ab, none refused or in conflict

no services configured
`
	if !strings.HasSuffix(b.String(), want) {
		t.Errorf("got:\n%s\nwant it to end with:\n%s", b.String(), want)
	}
}
