package keepalived

import (
	"strings"
	"testing"
	"testing/fstest"
	"time"
)

// TestVRRPModeCases: a vrrp_instance in a small configuration converted
// with --cluster vrrp, what the report says of it and what the agent file
// holds; every output must pass `lvsd check`.
func TestVRRPModeCases(t *testing.T) {
	const vs4 = "virtual_server 192.0.2.10 80 {\n lb_kind DR\n real_server 192.0.2.101 80 {\n}\n}\n"
	const vs6 = "virtual_server 2001:db8::10 80 {\n lb_kind DR\n real_server 2001:db8::101 80 {\n}\n}\n"
	v3 := "global_defs {\n vrrp_version 3\n}\n"
	instance := func(name, body string) string {
		return "vrrp_instance " + name + " {\n interface eth1\n" + body + "}\n"
	}
	cases := []struct {
		name, conf string
		report     []string // report lines that must be there
		agent      []string // lines the agent file must hold
		notInAgent []string // lines it must not hold
	}{
		{"the settings of the instance", v3 + instance("VI", " virtual_router_id 7\n priority 150\n advert_int 0.5\n nopreempt\n virtual_ipaddress {\n 192.0.2.10\n}\n") + vs4,
			[]string{"k.conf:4: vrrp_instance: mapped: cluster.mode: vrrp, virtual router 7",
				"k.conf:6: virtual_router_id: mapped: cluster.vrrp.virtual_router_id: 7",
				"k.conf:7: priority: mapped: cluster.vrrp.priority: 150",
				"k.conf:8: advert_int: mapped: cluster.vrrp.advert_int: 500ms",
				"k.conf:9: nopreempt: mapped: cluster.vrrp.preempt: false",
				"k.conf:11: 192.0.2.10: mapped: vip of service 192.0.2.10-80"},
			[]string{"interface: eth1", "  mode: vrrp", "    virtual_router_id: 7", "    priority: 150", "    advert_int: 500ms", "    preempt: false"},
			[]string{"key_file:", "conn_sync:", "label:", "\n  priority:"}},
		{"keepalived's defaults written out", v3 + instance("VI", " virtual_router_id 51\n") + vs4,
			[]string{"k.conf:4: vrrp_instance: mapped"},
			[]string{"    priority: 100", "    advert_int: 1s"},
			[]string{"preempt:"}},
		{"priority 255 is the owner's", v3 + instance("VI", " virtual_router_id 51\n priority 255\n") + vs4,
			[]string{"k.conf:7: priority: approximated: cluster.vrrp.priority: 254: 255 is for the owner of the addresses"},
			[]string{"    priority: 254"}, nil},
		{"advert_int in whole centiseconds", v3 + instance("VI", " virtual_router_id 51\n advert_int 0.125\n") + vs4,
			[]string{"k.conf:7: advert_int: approximated: cluster.vrrp.advert_int: 130ms: VRRP version 3 counts whole centiseconds"},
			[]string{"    advert_int: 130ms"}, nil},
		{"advert_int above 12 bits of centiseconds", v3 + instance("VI", " virtual_router_id 51\n advert_int 60\n") + vs4,
			[]string{"k.conf:7: advert_int: approximated: cluster.vrrp.advert_int: 40.95s"},
			[]string{"    advert_int: 40.95s"}, nil},
		{"keepalived speaks version 2 by default", instance("VI", " virtual_router_id 51\n") + vs4,
			[]string{"k.conf:1: vrrp_instance: approximated: cluster.mode: vrrp, virtual router 51: lvsd speaks VRRP version 3 beside keepalived until the switch to its own cluster; keepalived runs this instance in VRRP version 2 (keepalived's default)"},
			[]string{"  mode: vrrp"}, nil},
		{"global vrrp_version 2", "global_defs {\n vrrp_version 2\n}\n" + instance("VI", " virtual_router_id 51\n") + vs4,
			[]string{"k.conf:2: vrrp_version: not mapped: lvsd speaks only VRRP version 3",
				"k.conf:4: vrrp_instance: approximated: cluster.mode: vrrp, virtual router 51: lvsd speaks VRRP version 3 beside keepalived until the switch to its own cluster; keepalived runs this instance in VRRP version 2 (vrrp_version at k.conf:2)"},
			nil, nil},
		{"the instance's version wins over vrrp_version", v3 + instance("VI", " virtual_router_id 51\n version 2\n") + vs4,
			[]string{"k.conf:2: vrrp_version: mapped: lvsd speaks VRRP version 3",
				"(version at k.conf:7)", "k.conf:7: version: not mapped: lvsd speaks only VRRP version 3"},
			nil, nil},
		{"an IPv6 instance with the same settings", v3 + instance("VI_4", " virtual_router_id 51\n virtual_ipaddress {\n 192.0.2.10\n}\n") +
			instance("VI_6", " virtual_router_id 51\n virtual_ipaddress {\n 2001:db8::10\n}\n") + vs4 + vs6,
			[]string{"k.conf:11: vrrp_instance: mapped: lvsd's IPv6 virtual router 51, with the settings of cluster.vrrp",
				"k.conf:15: 2001:db8::10: mapped: vip of service 2001-db8--10-80"},
			[]string{"    virtual_router_id: 51"}, nil},
		{"an IPv6 instance with other settings", v3 + instance("VI_4", " virtual_router_id 51\n virtual_ipaddress {\n 192.0.2.10\n}\n") +
			instance("VI_6", " virtual_router_id 52\n virtual_ipaddress {\n 2001:db8::10\n}\n") + vs4 + vs6,
			[]string{"k.conf:11: vrrp_instance: not mapped: lvsd's IPv6 virtual router has the settings of the first vrrp_instance, and this one has virtual_router_id 52, not 51",
				"k.conf:15: 2001:db8::10: not mapped: inside a block that is not mapped"},
			[]string{"    virtual_router_id: 51"}, nil},
		{"a second IPv4 instance", v3 + instance("VI_1", " virtual_router_id 51\n virtual_ipaddress {\n 192.0.2.10\n}\n") +
			instance("VI_2", " virtual_router_id 52\n virtual_ipaddress {\n 192.0.2.20\n}\n") + vs4,
			[]string{"k.conf:11: vrrp_instance: not mapped: lvsd runs one IPv4 virtual router, the one of vrrp_instance at k.conf:4"},
			[]string{"    virtual_router_id: 51"}, []string{"52"}},
		{"an instance without virtual_router_id", v3 + instance("VI_0", " priority 200\n") + instance("VI_1", " virtual_router_id 9\n") + vs4,
			[]string{"k.conf:4: vrrp_instance: not mapped: no virtual_router_id in 1-255", "k.conf:8: vrrp_instance: mapped: cluster.mode: vrrp, virtual router 9"},
			[]string{"    virtual_router_id: 9", "    priority: 100"}, nil},
		{"no instance keepalived runs", v3 + instance("VI", " virtual_router_id 300\n") + vs4,
			[]string{"k.conf:4: vrrp_instance: not mapped: no virtual_router_id in 1-255"},
			nil, []string{"cluster:"}},
		{"no connection sync, no unicast", "global_defs {\n vrrp_version 3\n lvs_sync_daemon eth1 VI\n}\n" +
			instance("VI", " virtual_router_id 51\n unicast_src_ip 192.0.2.1\n unicast_peer {\n 192.0.2.2\n}\n authentication {\n auth_type PASS\n}\n") + vs4,
			[]string{"k.conf:3: lvs_sync_daemon: not mapped: mode vrrp does not sync connections",
				"k.conf:8: unicast_src_ip: not mapped: lvsd's advertisements leave from the interface's first address that is not a VIP",
				"k.conf:9: unicast_peer: not mapped: lvsd sends its VRRP advertisements to the multicast group only",
				"k.conf:12: authentication: not mapped: VRRP version 3 has no authentication"},
			[]string{"  mode: vrrp"}, []string{"conn_sync", "peers:", "bind:"}},
		{"an address no service uses", v3 + instance("VI", " virtual_router_id 51\n virtual_ipaddress {\n 192.0.2.10\n 192.0.2.99\n}\n") + vs4,
			[]string{"k.conf:9: 192.0.2.99: not mapped: no virtual_server uses 192.0.2.99: lvsd holds only the VIPs of its services; put it in the host's network configuration or add a service; keepalived's advertisements list it and lvsd's do not"},
			nil, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			nodes, err := Parse("k.conf", []byte(tc.conf), Options{FS: fstest.MapFS{}})
			if err != nil {
				t.Fatal(err)
			}
			res := Convert(nodes, ConvertOptions{Cluster: ClusterVRRP, KeyFile: "cluster.key"})
			var report strings.Builder
			res.WriteReport(&report)
			for _, want := range tc.report {
				if !strings.Contains(report.String(), want) {
					t.Errorf("the report lacks %q:\n%s", want, report.String())
				}
			}
			agentFile := res.Files[0].Content
			for _, want := range tc.agent {
				if !strings.Contains(agentFile, want+"\n") && !strings.Contains(agentFile, want+" ") {
					t.Errorf("the agent file lacks %q:\n%s", want, agentFile)
				}
			}
			for _, unwanted := range tc.notInAgent {
				if strings.Contains(agentFile, unwanted) {
					t.Errorf("the agent file holds %q:\n%s", unwanted, agentFile)
				}
			}
			checkLoads(t, res)
		})
	}
}

func TestVRRPAdvert(t *testing.T) {
	for _, tc := range []struct{ in, want time.Duration }{
		{time.Second, time.Second},
		{100 * time.Millisecond, 100 * time.Millisecond},
		{125 * time.Millisecond, 130 * time.Millisecond},
		{124 * time.Millisecond, 120 * time.Millisecond},
		{time.Millisecond, 10 * time.Millisecond},
		{time.Minute, 40950 * time.Millisecond},
	} {
		if got := vrrpAdvert(tc.in); got != tc.want {
			t.Errorf("vrrpAdvert(%s) = %s, want %s", tc.in, got, tc.want)
		}
	}
}
