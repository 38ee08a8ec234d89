package config

import (
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestVRRPGood(t *testing.T) {
	tests := []struct {
		name, body string
		want       VRRP
	}{
		{"defaults", "  vrrp: {virtual_router_id: 51}\n",
			VRRP{VirtualRouterID: 51, Priority: 100, AdvertInterval: time.Second, Preempt: true, Interface: "eth0"}},
		{"every key", "  vrrp:\n    virtual_router_id: 255\n    priority: 254\n    advert_int: 100ms\n    preempt: false\n    interface: eth1\n",
			VRRP{VirtualRouterID: 255, Priority: 254, AdvertInterval: 100 * time.Millisecond, Preempt: false, Interface: "eth1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, err := LoadAgent(writeFile(t, t.TempDir(), "lvsd.yaml", "interface: eth0\ncluster:\n  mode: vrrp\n"+tt.body))
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(a.Cluster.VRRP, tt.want) {
				t.Errorf("got %+v, want %+v", a.Cluster.VRRP, tt.want)
			}
			if a.Cluster.ConnSync.Enabled {
				t.Error("connection sync is on in mode vrrp")
			}
			if len(a.Warnings()) != 0 {
				t.Errorf("warnings: %q", a.Warnings())
			}
			// No key, so no identities to recommend.
			if w := a.Cluster.Warnings(); len(w) != 0 {
				t.Errorf("cluster warnings: %q", w)
			}
		})
	}
}

// The keys of lvsd's own cluster may stay in the block, ready for the
// switch; the director says they are not used.
func TestVRRPKeepsTheClusterKeysForTheSwitch(t *testing.T) {
	dir := t.TempDir()
	writeKey(t, dir, "cluster.key", testKey+"\n")
	a, err := LoadAgent(writeFile(t, dir, "lvsd.yaml",
		"interface: eth0\ncluster:\n  mode: vrrp\n  peers: [10.0.0.2]\n  key_file: cluster.key\n  vrrp: {virtual_router_id: 7}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if w := strings.Join(a.Warnings(), "\n"); !strings.Contains(w, "[peers key_file]") {
		t.Errorf("warnings %q do not name the unused keys", w)
	}
}

func TestVRRPBad(t *testing.T) {
	const head = "interface: eth0\ncluster:\n"
	cases := []struct{ name, body, want string }{
		{"no vrrp block", head + "  mode: vrrp\n", ":3:3: mode vrrp needs vrrp.virtual_router_id"},
		{"no router id", head + "  mode: vrrp\n  vrrp: {priority: 10}\n", ":3:3: mode vrrp needs vrrp.virtual_router_id"},
		{"router id 0", head + "  mode: vrrp\n  vrrp: {virtual_router_id: 0}\n", ":4:29: virtual_router_id 0 is not in 1-255"},
		{"address owner", head + "  mode: vrrp\n  vrrp: {virtual_router_id: 1, priority: 255}\n", ":4:42: priority 255 is for the owner of the VIP addresses"},
		{"advert_int too short", head + "  mode: vrrp\n  vrrp: {virtual_router_id: 1, advert_int: 5ms}\n", ":4:44: advert_int \"5ms\" is not a duration from 10ms to 40.95s"},
		{"advert_int not centiseconds", head + "  mode: vrrp\n  vrrp: {virtual_router_id: 1, advert_int: 105ms}\n", ":4:44: advert_int 105ms is not a whole number of centiseconds"},
		{"bad interface", head + "  mode: vrrp\n  vrrp: {virtual_router_id: 1, interface: \"a/b\"}\n", ":4:43: interface \"a/b\" is not an interface name"},
		{"cluster priority", head + "  mode: vrrp\n  priority: 10\n  vrrp: {virtual_router_id: 1}\n", ":4:13: in mode vrrp the priority is vrrp.priority"},
		{"conn_sync", head + "  mode: vrrp\n  conn_sync: {enabled: true}\n  vrrp: {virtual_router_id: 1}\n", ":4:24: mode vrrp does not sync connections"},
		{"config_sync", head + "  mode: vrrp\n  config_sync: true\n  vrrp: {virtual_router_id: 1}\n", ":4:16: mode vrrp has no cluster to distribute configuration through"},
		{"vrrp in another mode", head + "  insecure: true\n  vrrp: {virtual_router_id: 1}\n", ":4:10: vrrp is for mode vrrp (mode is active-standby)"},
		{"unknown key", head + "  mode: vrrp\n  vrrp: {virtual_router_id: 1, vrid: 2}\n", ":4:32: unknown key \"vrid\""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := LoadAgent(writeFile(t, t.TempDir(), "lvsd.yaml", c.body))
			if err == nil {
				t.Fatalf("no error for:\n%s", c.body)
			}
			if !strings.Contains(err.Error(), "lvsd.yaml"+c.want) {
				t.Errorf("error %q does not contain %q", err, "lvsd.yaml"+c.want)
			}
		})
	}
}
