package agent

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/fsnotify/fsnotify"
)

// The watch names the service files events name, once they settled for a
// tick, and asks for a scan of every file when an event names no single
// one.
func TestConfigWatchNamesChangedFiles(t *testing.T) {
	cw := &configWatch{agentFile: "/etc/lvsd/lvsd.yaml", agentDir: "/etc/lvsd", dir: "/etc/lvsd/services.d", dirty: map[string]bool{},
		related: map[string]bool{"/etc/lvsd/cluster.key": true}}
	ev := func(name string, op fsnotify.Op) { cw.note(fsnotify.Event{Name: name, Op: op}) }
	for _, c := range []struct {
		name   string
		events func()
		paths  []string
		rescan bool
	}{
		{"nothing", func() {}, nil, false},
		{"a service file written", func() { ev("/etc/lvsd/services.d/web.yaml", fsnotify.Write) }, []string{"/etc/lvsd/services.d/web.yaml"}, false},
		{"editor swap files ignored", func() {
			ev("/etc/lvsd/services.d/.web.yaml.swp", fsnotify.Create)
			ev("/etc/lvsd/services.d/web.yaml~", fsnotify.Create)
		}, nil, false},
		{"renamed into place", func() {
			ev("/etc/lvsd/services.d/.web.yaml.tmp", fsnotify.Create)
			ev("/etc/lvsd/services.d/api.yml", fsnotify.Create)
			ev("/etc/lvsd/services.d/old.yaml", fsnotify.Remove)
		}, []string{"/etc/lvsd/services.d/api.yml", "/etc/lvsd/services.d/old.yaml"}, false},
		{"the agent file", func() { ev("/etc/lvsd/lvsd.yaml", fsnotify.Write) }, []string{"/etc/lvsd/lvsd.yaml"}, false},
		{"a directory swap", func() { ev("/etc/lvsd/services.d/..data", fsnotify.Create) }, nil, true},
		{"a file the agent file reads", func() { ev("/etc/lvsd/cluster.key", fsnotify.Write) }, nil, true},
		// A log kept next to the agent file: reloading for it would be a
		// loop (every reload logs).
		{"another file next to the agent file", func() { ev("/etc/lvsd/lvsd.log", fsnotify.Write) }, nil, false},
		{"events lost", func() { cw.lost() }, nil, true},
	} {
		c.events()
		if _, _, ok := cw.take(); ok {
			t.Errorf("%s: taken before the events settled for a tick", c.name)
		}
		paths, rescan, ok := cw.take()
		slices.Sort(paths)
		if ok != (len(c.paths) > 0 || c.rescan) || !slices.Equal(paths, c.paths) || rescan != c.rescan {
			t.Errorf("%s: got %q rescan %v ok %v, want %q rescan %v", c.name, paths, rescan, ok, c.paths, c.rescan)
		}
	}
}

// An agent file that is a link through another name in its directory: an
// edit of the file it links to reloads it.
func TestConfigWatchFollowsAgentFileLink(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(dir, "lvsd-v2.yaml")
	if err := os.WriteFile(target, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	agentFile := filepath.Join(dir, "lvsd.yaml")
	if err := os.Symlink("lvsd-v2.yaml", agentFile); err != nil {
		t.Fatal(err)
	}
	cw, err := newConfigWatch(agentFile, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cw.close()
	cw.note(fsnotify.Event{Name: target, Op: fsnotify.Write})
	cw.take()
	if _, rescan, ok := cw.take(); !ok || !rescan {
		t.Errorf("an edit of the agent file's link target: rescan %v ok %v, want a rescan", rescan, ok)
	}
}
