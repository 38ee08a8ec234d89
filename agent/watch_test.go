package agent

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/lvsd/lvsd/agent/config"
)

// The watch names the service files events name, once they settled for a
// tick, and asks for a scan of every file when an event names no single
// one.
func TestConfigWatchNamesChangedFiles(t *testing.T) {
	cw := &configWatch{agentFile: "/etc/lvsd/lvsd.yaml", agentDir: "/etc/lvsd", dir: "/etc/lvsd/services.d", dirty: map[string]bool{}}
	cw.writes(&config.Agent{APISocket: "/etc/lvsd/lvsd.sock", StateDir: "/etc/lvsd/state", ReadOnlyAPI: &config.ReadOnlyAPI{Socket: "/etc/lvsd/ro.sock"}})
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
		{"another file next to the agent file", func() { ev("/etc/lvsd/key.pem", fsnotify.Write) }, nil, true},
		{"a log, an editor's files next to the agent file ignored", func() {
			ev("/etc/lvsd/lvsd.log", fsnotify.Write)
			ev("/etc/lvsd/.lvsd.yaml.swp", fsnotify.Write)
			ev("/etc/lvsd/lvsd.yaml~", fsnotify.Create)
		}, nil, false},
		{"a directory swap next to the agent file", func() { ev("/etc/lvsd/..data", fsnotify.Create) }, nil, true},
		{"the agent's own sockets and state next to the agent file ignored", func() {
			ev("/etc/lvsd/lvsd.sock", fsnotify.Create)
			ev("/etc/lvsd/ro.sock", fsnotify.Remove)
			ev("/etc/lvsd/state", fsnotify.Create)
		}, nil, false},
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

// With reload.watch: false an edit is not applied however long it
// settles, only at a reload request (SIGHUP); by default it is applied
// once it settled for a check interval.
func TestReloadWatchOff(t *testing.T) {
	for _, c := range []struct {
		name      string
		agentFile string
		byEdit    bool // the edit is applied without a reload request
	}{
		{"default", "", true},
		{"watch on", "reload: {watch: true}\n", true},
		{"watch off", "reload: {watch: false}\n", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t)
			writeTestFile(t, filepath.Join(e.dir, "lvsd.yaml"),
				"node: d1\ninterface: eth0\nservices_dir: services.d\nstate_dir: state\n"+c.agentFile)
			e.service("web", webTwo)
			a := e.agent()
			e.reconcile(a)
			e.service("api", "service: api\nvip: 10.0.0.51\nports: [80]\nbackends:\n  - {address: 10.0.0.11}\n")
			for range 5 { // settled for several check intervals, and past a resync
				e.now = e.now.Add(a.opts.Resync)
				a.checkFiles()
			}
			if got := len(a.cfg.Services); got != map[bool]int{true: 2, false: 1}[c.byEdit] {
				t.Fatalf("after the edit settled: %d services configured, want the edit applied: %v", got, c.byEdit)
			}
			a.reload("signal", nil)
			if got := len(a.cfg.Services); got != 2 {
				t.Fatalf("after a reload request: %d services, want 2", got)
			}
		})
	}
}

func TestScanInterval(t *testing.T) {
	for _, c := range []struct {
		every, cost time.Duration
		share       float64
		want        time.Duration
	}{
		{0, 0, scanShare, 0},                                                             // no watch, a free scan: every Check
		{0, 5 * time.Millisecond, scanShare, 0},                                          // every Check
		{0, 60 * time.Millisecond, scanShare, 0},                                         // a few files on 9p: every Check still
		{0, 150 * time.Millisecond, scanShare, 15 * time.Second},                         // many files: 1 % of the time
		{30 * time.Second, 40 * time.Millisecond, watchedScanShare, 30 * time.Second},    // 10,000 watched files natively
		{30 * time.Second, 1800 * time.Millisecond, watchedScanShare, 720 * time.Second}, // under emulation: 0.25 %
	} {
		if got := scanInterval(c.every, c.cost, c.share); got != c.want {
			t.Errorf("scanInterval(%v, %v, %v) = %v, want %v", c.every, c.cost, c.share, got, c.want)
		}
	}
}

// A scan that takes long puts the next one off: the stat of every file
// may not cost more than scanShare of the time, however many files there
// are; an edit is still found, later.
func TestCostlyScanRunsLessOften(t *testing.T) {
	e := newEnv(t)
	for i := range 100 {
		e.service(fmt.Sprintf("s%03d", i), fmt.Sprintf("service: s%03d\nvip: 10.0.0.1\nports: [%d]\nbackends:\n  - {address: 10.1.0.1}\n", i, 1000+i))
	}
	a := e.agent()
	e.reconcile(a)
	stats := 0
	a.loader.cache.Stat = func(p string) (fs.FileInfo, error) { stats++; e.now = e.now.Add(time.Millisecond); return os.Stat(p) }
	a.checkFiles() // 101 stats of 1 ms: the next scan is due in 10.1 s
	if stats != 101 {
		t.Fatalf("first scan: %d stats, want 101", stats)
	}
	e.service("s000", "service: s000\nvip: 10.0.0.1\nports: [1000]\nbackends:\n  - {address: 10.1.0.2}\n")
	for range 4 {
		stats = 0
		e.now = e.now.Add(DefaultCheck)
		a.checkFiles()
		if stats != 0 {
			t.Fatalf("%d stats %v after a scan of 101 ms, want none before 10.1 s", stats, DefaultCheck)
		}
	}
	for range 2 { // found, then settled
		e.now = e.now.Add(11 * time.Second)
		a.checkFiles()
	}
	if got := a.cfg.Services[0].Backends[0].Addr.String(); got != "10.1.0.2" {
		t.Errorf("after two late scans: s000's backend %s, want the edit (10.1.0.2)", got)
	}
}

// A scan is as costly as the least of the last ones: one that was
// descheduled (a loaded host) among cheap ones does not put the next off
// (TestHotReload waited 8 s for an edit after a 60 ms scan on 9p), while
// scans that are all slow still do.
func TestScanCostsIgnoreOneSlowScan(t *testing.T) {
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	for _, c := range []struct {
		name  string
		scans []time.Duration
		want  time.Duration
	}{
		{"first", []time.Duration{ms(60)}, ms(60)},
		{"one slow among cheap", []time.Duration{ms(2), ms(3), ms(60)}, ms(2)},
		{"all slow", []time.Duration{ms(1800), ms(1700), ms(1900)}, ms(1700)},
		{"cheap ones forgotten after four", []time.Duration{ms(2), ms(900), ms(800), ms(950), ms(1000)}, ms(800)},
	} {
		var costs scanCosts
		var got time.Duration
		for _, d := range c.scans {
			got = costs.add(d)
		}
		if got != c.want {
			t.Errorf("%s: scans %v cost %v, want %v", c.name, c.scans, got, c.want)
		}
	}
}

// Without a watch the files are scanned at every tick, also when a tick is
// handled a little sooner after it fired than the one before.
func TestScanEveryTickDespiteJitter(t *testing.T) {
	e := newEnv(t)
	e.service("web", "service: web\nvip: 10.0.0.1\nports: [80]\nbackends:\n  - {address: 10.1.0.1}\n")
	a := e.agent()
	e.reconcile(a)
	a.watch = nil
	lists := 0
	a.loader.cache.ReadDir = func(d string) ([]fs.DirEntry, error) { lists++; return os.ReadDir(d) }
	a.checkFiles()
	e.now = e.now.Add(DefaultCheck - 10*time.Millisecond) // the next tick, handled 10 ms sooner
	a.checkFiles()
	if lists != 2 {
		t.Errorf("%d scans in two ticks, want 2", lists)
	}
}

// The mount table names the file system a path is on: the deepest mount
// point above it wins, and only file systems whose edits inotify may miss
// count as remote.
func TestRemoteFSIn(t *testing.T) {
	const table = `22 1 0:21 / / rw,relatime - overlay overlay rw,lowerdir=/lower
23 22 0:22 / /proc rw - proc proc rw
30 22 0:30 / /work/main/e2e/out rw,relatime - 9p rw0 rw,dirsync
31 22 0:31 / /etc/lvsd rw - nfs4 server:/export rw
32 22 0:32 / /etc/lvsd/local rw - ext4 /dev/sda2 rw
33 22 0:33 / /mnt/my\040dir rw - fuse.sshfs host: rw
`
	for path, want := range map[string]string{
		"/work/main/e2e/out/TestHotReload": "9p",
		"/work/main/e2e":                   "",
		"/work/main/e2e/outside":           "",
		"/etc/lvsd":                        "nfs4",
		"/etc/lvsd/services.d":             "nfs4",
		"/etc/lvsd/local/services.d":       "",
		"/mnt/my dir/lvsd.yaml":            "fuse.sshfs",
		"/tmp":                             "",
	} {
		if got := remoteFSIn(table, path); got != want {
			t.Errorf("%s: %q, want %q", path, got, want)
		}
	}
}

// A reload that moves the services directory onto a file system whose
// edits inotify may miss drops the watch (the files are then scanned every
// check); a move to a local directory keeps it, following the new one.
func TestReloadOntoRemoteFSStopsWatching(t *testing.T) {
	for _, c := range []struct {
		fstype string
		watch  bool
	}{{"nfs4", false}, {"ext4", true}} {
		t.Run(c.fstype, func(t *testing.T) {
			e := newEnv(t)
			e.service("web", webTwo)
			a := e.agent()
			w, err := newConfigWatch(a.opts.ConfigPath, a.cfg.Agent.ServicesDir)
			if err != nil {
				t.Fatal(err)
			}
			a.watch = w
			defer func() { a.watch.close() }()
			moved := filepath.Join(e.dir, "moved.d")
			os.MkdirAll(moved, 0o755)
			table := filepath.Join(t.TempDir(), "mountinfo")
			writeTestFile(t, table, "22 1 0:21 / / rw - ext4 /dev/sda1 rw\n31 22 0:31 / "+moved+" rw - "+c.fstype+" server:/export rw\n")
			defer func(old string) { mountTable = old }(mountTable)
			mountTable = table
			writeTestFile(t, a.opts.ConfigPath, "node: d1\ninterface: eth0\nservices_dir: moved.d\nstate_dir: state\n")
			a.reload("signal", nil)
			if a.cfg.Agent.ServicesDir != moved {
				t.Fatalf("services_dir %q after the reload, want %q", a.cfg.Agent.ServicesDir, moved)
			}
			if got := a.watch != nil; got != c.watch {
				t.Fatalf("services directory on %s: watching %v, want %v", c.fstype, got, c.watch)
			}
			if c.watch && a.watch.dir != moved {
				t.Errorf("watching %q, want the new directory %q", a.watch.dir, moved)
			}
		})
	}
}
