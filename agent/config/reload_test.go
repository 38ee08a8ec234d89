package config

import (
	"strings"
	"testing"
)

// reload.watch: on unless false, for both roles; anything but a boolean
// is an error at its position.
func TestReloadWatch(t *testing.T) {
	for _, c := range []struct {
		block string
		want  bool
		err   string
	}{
		{"", true, ""},
		{"reload: {watch: true}\n", true, ""},
		{"reload: {watch: false}\n", false, ""},
		{"role: realserver\nreload: {watch: false}\n", false, ""},
		{"reload: {watch: sometimes}\n", false, "lvsd.yaml:3:17:"},
		{"reload: {wach: false}\n", false, "lvsd.yaml:3:10:"},
	} {
		head := "node: d1\ninterface: eth0\n"
		if strings.Contains(c.block, "realserver") {
			head = "node: d1\n"
		}
		p := writeFile(t, t.TempDir(), "lvsd.yaml", head+c.block)
		a, err := LoadAgent(p)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%q: error %v, want %q", c.block, err, c.err)
			}
			continue
		}
		if err != nil || a.WatchFiles != c.want {
			t.Errorf("%q: WatchFiles %v (%v), want %v", c.block, a != nil && a.WatchFiles, err, c.want)
		}
	}
}
