package config

import (
	"strings"
	"testing"
	"time"
)

// cluster.coordinated_changes: on by default under ecmp only, off where
// asked, refused outside ecmp, its wait bounded.
func TestCoordinatedChanges(t *testing.T) {
	const bgp = "bgp: {asn: 65001, peers: [{address: 10.0.0.10, asn: 65000}]}\n"
	for _, c := range []struct {
		cluster string
		want    CoordinatedChanges
		err     string
	}{
		{cluster: "{insecure: true, mode: ecmp}", want: CoordinatedChanges{Enabled: true, Wait: 30 * time.Second}},
		{cluster: "{insecure: true, mode: ecmp, coordinated_changes: {wait: 2m}}", want: CoordinatedChanges{Enabled: true, Wait: 2 * time.Minute}},
		{cluster: "{insecure: true, mode: ecmp, coordinated_changes: {enabled: false}}", want: CoordinatedChanges{Wait: 30 * time.Second}},
		{cluster: "{insecure: true}", want: CoordinatedChanges{Wait: 30 * time.Second}},
		{cluster: "{insecure: true, mode: active-active, coordinated_changes: {enabled: false}}", want: CoordinatedChanges{Wait: 30 * time.Second}},
		{cluster: "{insecure: true, coordinated_changes: {enabled: true}}",
			err: "lvsd.yaml:2:58: coordinated_changes is for cluster mode ecmp (mode is active-standby)"},
		{cluster: "{insecure: true, mode: ecmp, coordinated_changes: {wait: 500ms}}",
			err: "lvsd.yaml:2:67: coordinated_changes.wait \"500ms\" is not a duration from 1s to 10m0s"},
		{cluster: "{insecure: true, mode: ecmp, coordinated_changes: {timeout: 1m}}",
			err: "unknown key \"timeout\""},
	} {
		a, err := LoadAgent(writeFile(t, t.TempDir(), "lvsd.yaml", "interface: eth0\ncluster: "+c.cluster+"\n"+bgp))
		switch {
		case c.err != "":
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%s: error %v, want %q", c.cluster, err, c.err)
			}
		case err != nil:
			t.Errorf("%s: %v", c.cluster, err)
		case a.Cluster.CoordinatedChanges != c.want:
			t.Errorf("%s: %+v, want %+v", c.cluster, a.Cluster.CoordinatedChanges, c.want)
		}
	}
}
