package keepalived

import (
	"fmt"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/lvsd/lvsd/agent/importer"
)

func TestExpandRange(t *testing.T) {
	cases := []struct{ in, want string }{
		{"10.0.0.1", "[10.0.0.1]"},
		{"10.0.0.1-3", "[10.0.0.1 10.0.0.2 10.0.0.3]"},
		{"10.0.0.255-10.0.1.1", "[10.0.0.255 10.0.1.0 10.0.1.1]"},
		{"10.0.0.8/30", "[10.0.0.8 10.0.0.9 10.0.0.10 10.0.0.11]"},
		{"ae00::2-4", "[ae00::2 ae00::3 ae00::4]"},
		{"10.0.0.5-3", `range "10.0.0.5-3" ends before it starts`},
		{"10.0.0.0/8", "prefix 10.0.0.0/8 holds more than 4096 addresses"},
		{"10.0.0.1-x", `"10.0.0.1-x" is not an address range like 10.0.0.1-10`},
		{"eth0", `"eth0" is not an IP address, range or prefix`},
	}
	for _, tc := range cases {
		got, err := expandRange(tc.in)
		s := fmt.Sprint(got)
		if err != nil {
			s = err.Error()
		}
		if s != tc.want {
			t.Errorf("expandRange(%q) = %s, want %s", tc.in, s, tc.want)
		}
	}
}

func TestSplitCommand(t *testing.T) {
	cases := []struct{ in, want string }{
		{"/bin/check", "[/bin/check]"},
		{"/bin/check  -p 80", "[/bin/check -p 80]"},
		{`/bin/check 'a b' "c d"`, "[/bin/check a b c d]"},
		{`/bin/check 'a`, "error"},
	}
	for _, tc := range cases {
		got, err := splitCommand(tc.in)
		s := fmt.Sprint(got)
		if err != nil {
			s = "error"
		}
		if s != tc.want {
			t.Errorf("splitCommand(%q) = %s, want %s", tc.in, s, tc.want)
		}
	}
}

// TestConvertCases: a keyword in a small configuration, what the report
// says of it and what the service file holds.
func TestConvertCases(t *testing.T) {
	const head = "virtual_server 10.0.0.1 80 {\n lb_kind DR\n"
	const rs = " real_server 10.1.0.1 80 {\n"
	cases := []struct {
		name, conf string
		opt        ConvertOptions
		report     string // a report line that must be there
		file       string // a line the service file must hold ("" none; "-" no file)
	}{
		{"default scheduler is written out", head + rs + "}\n}\n", ConvertOptions{},
			"k.conf:1: virtual_server: mapped: a service of VIP 10.0.0.1, port 80", "scheduler: wlc"},
		{"--scheduler mh", head + " lb_algo rr\n" + rs + "}\n}\n", ConvertOptions{Scheduler: "mh"},
			"k.conf:3: lb_algo: mapped: scheduler: mh (--scheduler; keepalived's was rr)", "scheduler: mh"},
		{"mh without mh-port hashes the client address", head + " lb_algo mh\n" + rs + "}\n}\n", ConvertOptions{},
			"k.conf:3: lb_algo: mapped: scheduler: mh", "affinity: client-ip"},
		{"DR cannot change the port", head + " real_server 10.1.0.1 8080 {\n}\n}\n", ConvertOptions{},
			"k.conf:3: real_server: approximated: backend 10.1.0.1: dr forwarding cannot change the port", "  - {address: 10.1.0.1, weight: 1}"},
		{"NAT keeps the port", "virtual_server 10.0.0.1 80 {\n lb_kind NAT\n real_server 10.1.0.1 8080 {\n}\n}\n", ConvertOptions{},
			"k.conf:3: real_server: mapped: backend 10.1.0.1, port: 8080", "  - {address: 10.1.0.1, port: 8080, weight: 1}"},
		{"connect_timeout above delay_loop", head + " delay_loop 2\n" + rs + "TCP_CHECK {\n connect_timeout 5\n}\n}\n}\n", ConvertOptions{},
			"k.conf:5: TCP_CHECK: approximated: its connect_timeout exceeds delay_loop; lvsd's timeout is at most the interval: 2s", "  timeout: 2s"},
		{"two virtual servers on one port", head + rs + "}\n}\n" + head + rs + "}\n}\n", ConvertOptions{},
			"k.conf:6: virtual_server: not mapped: VIP 10.0.0.1: service 10.0.0.1-80 takes the same protocol and ports", ""},
		{"a VIP lvsd cannot hold", "virtual_server 127.0.0.1 80 {\n" + rs + "}\n}\n", ConvertOptions{},
			"k.conf:1: virtual_server: not mapped: 127.0.0.1 is not a unicast address lvsd can hold as a VIP", "-"},
		{"no real server", "virtual_server 10.0.0.1 80 {\n}\n", ConvertOptions{},
			"k.conf:1: virtual_server: approximated: no real_server could be mapped", "-"},
		{"IPv6 gue", "virtual_server 2001:db8::1 80 {\n lb_kind TUN type gue port 6080\n real_server 2001:db8::10 80 {\n}\n}\n", ConvertOptions{},
			"k.conf:2: lb_kind: approximated: VIP 2001:db8::1: an IPv6 service tunnels with ipip", "forwarding: tunnel"},
		{"status codes", head + rs + "HTTP_GET {\n url {\n path /x\n status_code 200 301-302\n}\n}\n}\n}\n", ConvertOptions{},
			"k.conf:7: status_code: approximated: expect: 200-302, the span of 200 301-302", `{type: http, port: 80, path: /x, expect: "200-302"}`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			nodes, err := Parse("k.conf", []byte(tc.conf), Options{FS: fstest.MapFS{}})
			if err != nil {
				t.Fatal(err)
			}
			res := Convert(nodes, tc.opt)
			var report strings.Builder
			res.WriteReport(&report)
			if !strings.Contains(report.String(), tc.report) {
				t.Errorf("the report lacks %q:\n%s", tc.report, report.String())
			}
			services := serviceFiles(res)
			switch {
			case tc.file == "-" && services != "":
				t.Errorf("a service file was written:\n%s", services)
			case tc.file != "-" && !strings.Contains(services, tc.file+"\n") && !strings.Contains(services, tc.file+" "):
				t.Errorf("the service files lack %q:\n%s", tc.file, services)
			}
			if err := res.CheckServices(); err != nil {
				t.Errorf("lvsd check refuses the import: %v", err)
			}
		})
	}
}

func serviceFiles(r *importer.Result) string {
	var b strings.Builder
	for _, f := range r.Files {
		if strings.HasPrefix(f.Path, "services.d/") {
			b.WriteString(f.Content)
		}
	}
	return b.String()
}
