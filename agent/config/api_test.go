package config

import (
	"path/filepath"
	"strings"
	"testing"
)

func TestReadOnlyAPI(t *testing.T) {
	for _, c := range []struct {
		block  string
		socket string // relative to the folder; "" = off
		gid    int
		err    string
	}{
		{block: "", socket: ""},
		{block: "api: {read_only_socket: ro.sock, read_only_group: \"0\"}\n", socket: "ro.sock", gid: 0},
		{block: "api: {read_only_socket: /run/lvsd/ro.sock, read_only_group: root}\n", socket: "/run/lvsd/ro.sock", gid: 0},
		{block: "api: {read_only_socket: ro.sock}\n",
			err: "lvsd.yaml:3:25: read_only_socket needs read_only_group: the group whose members may read (the socket is mode 0660)"},
		{block: "api: {read_only_group: root}\n",
			err: "lvsd.yaml:3:24: read_only_group needs read_only_socket"},
		{block: "api: {socket: a.sock, read_only_socket: a.sock, read_only_group: root}\n",
			err: "lvsd.yaml:3:41: read_only_socket"},
		{block: "api: {read_only_socket: ro.sock, read_only_group: no-such-group-lvsd}\n",
			err: `lvsd.yaml:3:51: read_only_group "no-such-group-lvsd": no such group on this host`},
		{block: "api: {read_only_socket: ro.sock, read_only_group: \"4000000000\"}\n",
			err: `read_only_group "4000000000": no such group on this host`},
		{block: "api: {read_only: yes}\n", err: "lvsd.yaml:3:7:"},
	} {
		dir := t.TempDir()
		p := writeFile(t, dir, "lvsd.yaml", "node: d1\ninterface: eth0\n"+c.block)
		a, err := LoadAgent(p)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%q: error %v, want %q", c.block, err, c.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%q: %v", c.block, err)
			continue
		}
		switch {
		case c.socket == "" && a.ReadOnlyAPI != nil:
			t.Errorf("%q: read-only socket %+v, want none", c.block, a.ReadOnlyAPI)
		case c.socket != "" && a.ReadOnlyAPI == nil:
			t.Errorf("%q: no read-only socket", c.block)
		case c.socket != "":
			want := c.socket
			if !filepath.IsAbs(want) {
				want = filepath.Join(dir, want)
			}
			if a.ReadOnlyAPI.Socket != want || a.ReadOnlyAPI.GID != c.gid {
				t.Errorf("%q: %+v, want socket %s gid %d", c.block, a.ReadOnlyAPI, want, c.gid)
			}
		}
	}
}
