package spec

import (
	"maps"
	"testing"
)

func TestRecommendedSyncSysctls(t *testing.T) {
	want := map[string]string{
		"net/ipv4/vs/sync_version": "1", "net/ipv4/vs/sync_ports": "1", "net/ipv4/vs/sync_threshold": "3 0",
		"net/ipv4/vs/sync_refresh_period": "10", "net/ipv4/vs/sync_persist_mode": "0",
		"net/ipv4/vs/sloppy_tcp": "1", "net/ipv4/vs/sloppy_sctp": "1",
	}
	s := RecommendedSyncSysctls()
	if err := s.Validate(); err != nil {
		t.Fatal(err)
	}
	if got := s.Sysctls(); !maps.Equal(got, want) {
		t.Errorf("Sysctls:\n got %v\nwant %v", got, want)
	}
}

func TestSyncSysctlsValidate(t *testing.T) {
	for _, s := range []SyncSysctls{{Threshold: 50, Period: 50}, {Threshold: -1}, {RefreshPeriod: -1}} {
		if err := s.Validate(); err == nil {
			t.Errorf("%+v: want an error", s)
		}
	}
	// A vector the kernel would take: threshold above a zero period.
	if err := (SyncSysctls{Threshold: 7, Period: 0}).Validate(); err != nil {
		t.Error(err)
	}
}
