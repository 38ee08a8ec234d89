package configsync

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/lvsd/lvsd/agent/config"
	"github.com/lvsd/lvsd/agent/statefile"
	"github.com/lvsd/lvsd/cluster/configsync"
)

// The managed directory holds each received file under its name, and the
// records kept (as they came, signed) under recordsDir, so that a restart
// knows what it had and what was withdrawn.
const recordsDir = ".records"

func (s *Syncer) managedPath(name string) string {
	return filepath.Join(s.cfg.Dir, ManagedDir, name)
}

func (s *Syncer) recordPath(name string) string {
	return filepath.Join(s.cfg.Dir, ManagedDir, recordsDir, name)
}

// linkTarget is what the link in the services directory to a managed file
// says: relative, so the directory may move.
func linkTarget(name string) string { return filepath.Join(ManagedDir, name) }

// prepare makes the managed directory, readable by all, writable by root
// alone (the loader's strict_modes check it like the services directory).
func (s *Syncer) prepare() error {
	records := filepath.Join(s.cfg.Dir, ManagedDir, recordsDir)
	if err := os.MkdirAll(records, 0o755); err != nil {
		return err
	}
	// Whatever the umask: a group-writable directory would fail the
	// loader's strict_modes.
	return errors.Join(os.Chmod(filepath.Dir(records), 0o755), os.Chmod(records, 0o755))
}

// isManagedLink reports whether the entry name of the services directory
// is config sync's link to its managed file: anything else there is the
// operator's.
func (s *Syncer) isManagedLink(name string) bool {
	path := filepath.Join(s.cfg.Dir, name)
	fi, err := os.Lstat(path)
	if err != nil || fi.Mode()&fs.ModeSymlink == 0 {
		return false
	}
	to, err := os.Readlink(path)
	return err == nil && to == linkTarget(name)
}

// loadKept takes the records kept by the last run, checking each again.
func (s *Syncer) loadKept() {
	dir := filepath.Join(s.cfg.Dir, ManagedDir, recordsDir)
	entries, err := os.ReadDir(dir)
	if err != nil {
		s.log.Warn("config sync: reading the kept records", "err", err)
		return
	}
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".") {
			continue
		}
		path := filepath.Join(dir, e.Name())
		data, err := readAtMost(path, configsync.MaxData+64<<10)
		if err == nil {
			var m configsync.Message
			m, err = configsync.Decode(data, s.cfg.Keys)
			switch {
			case err != nil:
			case m.Record == nil || m.Record.Name != e.Name():
				err = errors.New("is not the record of its name")
			default:
				_, _, err = s.store.Accept(m.Record)
			}
		}
		if err != nil {
			s.log.Warn("config sync: dropping a kept record", "file", path, "err", err)
			_ = os.Remove(path)
		}
	}
	for _, name := range s.store.Names() {
		s.apply(name)
	}
}

// keep writes a record the store took, for the next run.
func (s *Syncer) keep(r *configsync.Record) {
	if err := statefile.WriteAtomic(s.recordPath(r.Name), r.Wire, 0o644); err != nil {
		s.log.Warn("config sync: keeping a record", "file", r.Name, "err", err)
	}
}

// apply makes the services directory show the record kept for name: a
// link to the managed file holding another director's publication, which
// passed the check; nothing for a withdrawn one. A local file of that name
// is the operator's and stays as it is.
func (s *Syncer) apply(name string) {
	r := s.store.Get(name)
	link := filepath.Join(s.cfg.Dir, name)
	ours := s.isManagedLink(name)
	_, lerr := os.Lstat(link)
	exists := lerr == nil
	if r == nil || r.Deleted || r.Publisher == s.cfg.Node {
		s.setRefused(name, "")
		if ours {
			err := errors.Join(os.Remove(link), os.Remove(s.managedPath(name)))
			s.log.Info("config sync: removed a withdrawn file", "file", name, "err", err)
			s.requestReload()
		}
		return
	}
	if exists && !ours {
		if lf, ok := s.local[name]; !ok || !bytes.Equal(lf.data, r.Data) {
			s.setConflict(name, localWins+r.Publisher+"'s publication; it is left as it is")
			s.log.Warn("config sync: a local file overrides a publication; it is left as it is", "file", link, "publisher", r.Publisher)
		} else {
			s.clearLocalConflict(name)
		}
		return
	}
	s.clearLocalConflict(name)
	var problems config.List
	config.ParseServices(r.Publisher+":"+r.Path, r.Data, &problems, s.cfg.LaxModes)
	if len(problems) > 0 {
		s.setRefused(name, problems.Error())
		s.log.Error("config sync: refusing a published file", "file", name, "publisher", r.Publisher, "err", problems.Error())
		return
	}
	s.setRefused(name, "")
	if ours {
		if old, err := os.ReadFile(s.managedPath(name)); err == nil && bytes.Equal(old, r.Data) {
			return
		}
	}
	if err := statefile.WriteAtomic(s.managedPath(name), r.Data, 0o644); err != nil {
		s.log.Error("config sync: writing a received file", "file", name, "err", err)
		return
	}
	var err error
	if ours {
		// A new link in place of the old one: the agent's watch sees the
		// name change and reads the file again.
		tmp := filepath.Join(s.cfg.Dir, "."+name+".cluster-link")
		_ = os.Remove(tmp)
		if err = os.Symlink(linkTarget(name), tmp); err == nil {
			err = os.Rename(tmp, link)
		}
	} else {
		// Symlink fails if the operator put a file there meanwhile: it is
		// never replaced.
		err = os.Symlink(linkTarget(name), link)
	}
	if err != nil {
		s.log.Error("config sync: linking a received file", "file", link, "err", err)
		return
	}
	s.log.Info("config sync: wrote a received file", "file", link, "publisher", r.Publisher, "version", r.Version)
	s.requestReload()
}

// localWins starts the conflict of a local file over a publication.
const localWins = "a local file of this director overrides "

// clearLocalConflict drops the conflict of a local file over name's
// publication, which is no more; one between publishers stays.
func (s *Syncer) clearLocalConflict(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if strings.HasPrefix(s.status.Conflicts[name], localWins) {
		delete(s.status.Conflicts, name)
	}
}
