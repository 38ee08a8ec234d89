package keepalived

import (
	"fmt"
	"strings"
	"testing"
	"testing/fstest"
)

// dump writes statements one a line, "line:keyword args" indented by depth.
func dump(nodes []*Node) string {
	var b strings.Builder
	var walk func([]*Node, int)
	walk = func(ns []*Node, depth int) {
		for _, n := range ns {
			fmt.Fprintf(&b, "%s%s:%d:%s", strings.Repeat("  ", depth), n.File, n.Line, n.Keyword)
			for _, a := range n.Args {
				b.WriteString(" " + a)
			}
			if n.Block {
				b.WriteString(" {}")
			}
			b.WriteByte('\n')
			walk(n.Children, depth+1)
		}
	}
	walk(nodes, 0)
	return b.String()
}

func TestParse(t *testing.T) {
	files := fstest.MapFS{
		"etc/keepalived/conf.d/a.conf":   {Data: []byte("virtual_server 10.0.0.1 80 {\n  lb_algo rr\n}\n")},
		"etc/keepalived/conf.d/b.conf":   {Data: []byte("virtual_server 10.0.0.2 80 {\n}\n")},
		"etc/keepalived/loop.conf":       {Data: []byte("include loop.conf\n")},
		"etc/keepalived/deep/1.conf":     {Data: []byte("include 2.conf\n")},
		"etc/keepalived/deep/2.conf":     {Data: []byte("include 1.conf\n")},
		"etc/keepalived/other/rel.conf":  {Data: []byte("global_defs {\n  router_id r1\n}\n")},
		"etc/keepalived/other/child.cfg": {Data: []byte("include rel.conf\n")},
	}
	cases := []struct {
		name, text string
		configID   string
		want       string // dump, or the error
	}{
		{name: "block and arguments",
			text: "virtual_server 10.0.0.1 80 {\n  lb_algo rr\n  real_server 10.1.0.1 80 {\n    weight 2\n  }\n}\n",
			want: "k.conf:1:virtual_server 10.0.0.1 80 {}\n  k.conf:2:lb_algo rr\n  k.conf:3:real_server 10.1.0.1 80 {}\n    k.conf:4:weight 2\n"},
		{name: "comments with # and !",
			text: "! a comment\nglobal_defs { # trailing\n  router_id r1 ! also\n}\n",
			want: "k.conf:2:global_defs {}\n  k.conf:3:router_id r1\n"},
		{name: "quoted strings keep spaces and comment characters",
			text: "vrrp_script chk {\n  script \"/bin/check --flag 'x y' #1\"\n}\n",
			want: "k.conf:1:vrrp_script chk {}\n  k.conf:2:script /bin/check --flag 'x y' #1\n"},
		{name: "brace on its own line",
			text: "virtual_server 10.0.0.1 80\n{\n  protocol TCP\n}\n",
			want: "k.conf:1:virtual_server 10.0.0.1 80 {}\n  k.conf:3:protocol TCP\n"},
		{name: "one-line blocks",
			text: "vrrp_instance VI { virtual_ipaddress { 10.0.0.1 10.0.0.2 } }\n",
			want: "k.conf:1:vrrp_instance VI {}\n  k.conf:1:virtual_ipaddress {}\n    k.conf:1:10.0.0.1 10.0.0.2\n"},
		{name: "include glob in name order, relative to the including file",
			text: "include conf.d/*.conf\n",
			want: "/etc/keepalived/conf.d/a.conf:1:virtual_server 10.0.0.1 80 {}\n  /etc/keepalived/conf.d/a.conf:2:lb_algo rr\n/etc/keepalived/conf.d/b.conf:1:virtual_server 10.0.0.2 80 {}\n"},
		{name: "an include's own include is relative to it",
			text: "include other/child.cfg\n",
			want: "/etc/keepalived/other/rel.conf:1:global_defs {}\n  /etc/keepalived/other/rel.conf:2:router_id r1\n"},
		{name: "conditional lines without a config id",
			text: "@high priority 170\n@^high priority 50\nadvert_int 1\n",
			want: "k.conf:2:priority 50\nk.conf:3:advert_int 1\n"},
		{name: "conditional lines with config id", configID: "high",
			text: "@high priority 170\n@^high priority 50\n",
			want: "k.conf:1:priority 170\n"},
		{name: "CRLF line ends", text: "global_defs {\r\n  router_id r1\r\n}\r\n",
			want: "k.conf:1:global_defs {}\n  k.conf:2:router_id r1\n"},

		{name: "unclosed block names where it opened", text: "global_defs {\n  router_id r1\nvrrp_instance VI {\n}\n",
			want: "error: /etc/keepalived/k.conf:1: block global_defs opened here is not closed by the end of the file (a \"}\" is missing)"},
		{name: "stray closing brace", text: "global_defs {\n}\n}\n",
			want: "error: /etc/keepalived/k.conf:3: \"}\" closes no block"},
		{name: "brace opening nothing", text: "{\n}\n",
			want: "error: /etc/keepalived/k.conf:1: \"{\" opens no block: a block is `name arguments {`"},
		{name: "unclosed quote", text: "global_defs {\n  router_id \"r1\n}\n",
			want: "error: /etc/keepalived/k.conf:2: a quoted string is not closed on its line"},
		{name: "include matching nothing", text: "\n\ninclude /nowhere/*.conf\n",
			want: "error: /etc/keepalived/k.conf:3: include /nowhere/*.conf matches no file"},
		{name: "include loop", text: "include loop.conf\n",
			want: "error: /etc/keepalived/loop.conf:1: /etc/keepalived/loop.conf includes itself (through /etc/keepalived/k.conf → /etc/keepalived/loop.conf)"},
		{name: "include cycle through two files", text: "include deep/1.conf\n",
			want: "error: /etc/keepalived/deep/2.conf:1: /etc/keepalived/deep/1.conf includes itself (through /etc/keepalived/k.conf → /etc/keepalived/deep/1.conf → /etc/keepalived/deep/2.conf)"},
		{name: "include without a file", text: "include\n",
			want: "error: /etc/keepalived/k.conf:1: include takes one file name or pattern"},
		{name: "parameter substitution", text: "$VIP=10.0.0.1\n",
			want: "error: /etc/keepalived/k.conf:1: parameter definitions and substitution ($NAME) are not read: expand them first (keepalived -t -d prints the expanded configuration)"},
		{name: "control character", text: "global_defs {\x01\n}\n",
			want: "error: /etc/keepalived/k.conf:1: holds a control character: keepalived.conf is text"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			name := "k.conf"
			if strings.Contains(tc.text, "include") || strings.HasPrefix(tc.want, "error") {
				name = "/etc/keepalived/k.conf"
			}
			nodes, err := Parse(name, []byte(tc.text), Options{FS: files, ConfigID: tc.configID})
			got := dump(nodes)
			if err != nil {
				got = "error: " + err.Error()
			}
			if got != tc.want {
				t.Errorf("got\n%s\nwant\n%s", got, tc.want)
			}
		})
	}
}

func TestParseBounds(t *testing.T) {
	deep := strings.Repeat("a {\n", MaxNesting+1) + strings.Repeat("}\n", MaxNesting+1)
	if _, err := Parse("k.conf", []byte(deep), Options{FS: fstest.MapFS{}}); err == nil || !strings.Contains(err.Error(), "nest deeper") {
		t.Errorf("nesting %d deep: %v, want an error", MaxNesting+1, err)
	}
	files := fstest.MapFS{"big.conf": {Data: make([]byte, MaxFileSize+1)}}
	if _, err := ParseFile("/big.conf", Options{FS: files}); err == nil || !strings.Contains(err.Error(), "larger than") {
		t.Errorf("a file over %d bytes: %v, want an error", MaxFileSize, err)
	}
}

// FuzzParse: any text parses or fails with an error at a line, within the
// bounds, and converting what parses never panics and gives service files
// `lvsd check` accepts.
func FuzzParse(f *testing.F) {
	f.Add("virtual_server 10.0.0.1 80 {\n lb_algo rr\n lb_kind DR\n real_server 10.1.0.1 80 { weight 2\n TCP_CHECK { connect_timeout 3 } }\n}\n")
	f.Add("virtual_server_group G { 10.0.0.1-3 80\n fwmark 1 }\nvirtual_server group G { real_server 10.1.0.1 80 { HTTP_GET { url { path / status_code 200-299 404 } } } }\n")
	f.Add("vrrp_instance V { interface eth0\n priority 150\n advert_int 0.5\n virtual_ipaddress { 10.0.0.1/32 dev eth0 }\n track_script { s } }\nvrrp_script s { script \"/bin/true\"\n interval 1 }\n")
	f.Add("global_defs { lvs_timeouts tcp 60 tcpfin 30 udp 20\n lvs_sync_daemon eth0 VI }\n@a x\n! c\n# d\n\"q\" {\n}")
	f.Add("virtual_server 2001:db8::1 443 { lb_kind TUN type gue port 6080 csum\n persistence_timeout\n persistence_granularity 64\n sorry_server 2001:db8::99 443\n real_server 2001:db8::10 443 { SSL_GET { url { path /h } } MISC_CHECK { misc_path \"/bin/c 'a b'\" } } }")
	f.Fuzz(func(t *testing.T, text string) {
		nodes, err := Parse("k.conf", []byte(text), Options{FS: fstest.MapFS{}})
		if err != nil {
			if !strings.HasPrefix(err.Error(), "k.conf:") {
				t.Fatalf("error %q does not name file and line", err)
			}
			return
		}
		res := Convert(nodes, ConvertOptions{})
		if err := res.CheckServices(); err != nil {
			t.Fatalf("converted service files fail lvsd check:\n%v\ninput:\n%s", err, text)
		}
	})
}
