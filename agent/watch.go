package agent

import (
	"path/filepath"
	"strings"

	"github.com/fsnotify/fsnotify"
	"github.com/lvsd/lvsd/agent/config"
	"github.com/lvsd/lvsd/agent/config/servicesdir"
)

// configWatch tells the agent loop which configuration files changed, from
// inotify, so that an edit costs a stat and a read of that file, and an
// idle agent stats nothing. What inotify cannot see (a service file that
// is a symbolic link to a file elsewhere, edited there) the scan every
// Resync finds; where inotify is unavailable the agent scans every Check.
// One goroutine (the agent loop) owns it.
type configWatch struct {
	w         *fsnotify.Watcher
	agentFile string
	agentDir  string
	dir       string // the services directory watched ("": none)
	dirty     map[string]bool
	// rescan: an event named no single service file (a directory swapped
	// as Kubernetes does with ..data, events lost): check every file.
	rescan bool
	// settling: an event came since the last tick.
	settling bool
	// own are paths the agent writes itself (its sockets, its state
	// directory): their events are none of the configuration's.
	own map[string]bool
}

// writes tells the watch which paths the agent writes itself, for a.
func (cw *configWatch) writes(a *config.Agent) {
	cw.own = map[string]bool{}
	for _, p := range []string{a.APISocket, a.StateDir} {
		if p != "" {
			cw.own[filepath.Clean(p)] = true
		}
	}
	if a.ReadOnlyAPI != nil {
		cw.own[filepath.Clean(a.ReadOnlyAPI.Socket)] = true
	}
}

// newConfigWatch watches the agent file's directory and the services
// directory.
func newConfigWatch(agentFile, servicesDir string) (*configWatch, error) {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return nil, err
	}
	cw := &configWatch{w: w, agentFile: filepath.Clean(agentFile), agentDir: filepath.Dir(filepath.Clean(agentFile)),
		dirty: map[string]bool{}}
	if err := w.Add(cw.agentDir); err != nil {
		w.Close()
		return nil, err
	}
	if err := cw.follow(servicesDir); err != nil {
		w.Close()
		return nil, err
	}
	return cw, nil
}

// follow watches dir as the services directory instead of the one before.
func (cw *configWatch) follow(dir string) error {
	if dir == "" {
		return nil // not a director: no services directory
	}
	dir = filepath.Clean(dir)
	if dir == cw.dir {
		return nil
	}
	if cw.dir != "" && cw.dir != cw.agentDir {
		_ = cw.w.Remove(cw.dir) // gone already, or will be: nothing to undo
	}
	cw.dir = ""
	if dir != cw.agentDir {
		if err := cw.w.Add(dir); err != nil {
			return err
		}
	}
	cw.dir = dir
	return nil
}

// events and errors are nil on a nil watch: a select never picks them.
func (cw *configWatch) events() <-chan fsnotify.Event {
	if cw == nil {
		return nil
	}
	return cw.w.Events
}

func (cw *configWatch) errors() <-chan error {
	if cw == nil {
		return nil
	}
	return cw.w.Errors
}

// note records what an event says changed.
func (cw *configWatch) note(ev fsnotify.Event) {
	name := filepath.Clean(ev.Name)
	dir, base := filepath.Dir(name), filepath.Base(name)
	if dir == cw.agentDir && dir != cw.dir && name != cw.agentFile && (neverConfig(base) || cw.own[name]) {
		return // a log, an editor's file, the agent's socket next to the agent file: no reload, nor a delay of one
	}
	cw.settling = true
	switch {
	case name == cw.agentFile:
		cw.dirty[name] = true
	case name == cw.dir || name == cw.agentDir:
		// The directory itself went or moved: watch it again (or fall
		// back to scanning) at the reload.
		cw.rescan = true
		if ev.Has(fsnotify.Remove) || ev.Has(fsnotify.Rename) {
			if name == cw.dir {
				cw.dir = ""
			}
		}
	case dir == cw.dir && servicesdir.IsServiceFile(base):
		cw.dirty[name] = true
	case strings.HasPrefix(base, ".."):
		cw.rescan = true // an atomic directory swap (Kubernetes' ..data)
	case dir == cw.agentDir && dir != cw.dir:
		cw.rescan = true // the agent file may be a link through another name
	}
}

// neverConfig says a file beside the agent file cannot be part of the
// configuration: hidden (an editor's swap file; not Kubernetes' ..data,
// which swaps the whole directory), an editor's backup, or a log. Every
// other file there may be one the agent file names (a key), so its events
// rescan everything — which, with 10,000 service files, costs as much as
// a log line every few seconds must not.
func neverConfig(base string) bool {
	return strings.HasPrefix(base, ".") && !strings.HasPrefix(base, "..") ||
		strings.HasSuffix(base, "~") || strings.HasSuffix(base, ".swp") || strings.HasSuffix(base, ".log")
}

// lost records that events may have been lost (the queue overflowed).
func (cw *configWatch) lost() {
	cw.settling, cw.rescan = true, true
}

// take returns what changed once no event came for a whole tick (an
// editor's truncate-then-write must not be read half way): the paths, or
// all with rescan. ok is false when there is nothing to reload yet.
func (cw *configWatch) take() (paths []string, rescan, ok bool) {
	if cw.settling {
		cw.settling = false
		return nil, false, false
	}
	if !cw.rescan && len(cw.dirty) == 0 {
		return nil, false, false
	}
	for p := range cw.dirty {
		paths = append(paths, p)
	}
	rescan = cw.rescan
	cw.dirty, cw.rescan = map[string]bool{}, false
	return paths, rescan, true
}

func (cw *configWatch) close() {
	if cw != nil {
		cw.w.Close()
	}
}
