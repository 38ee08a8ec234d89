package configsync

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/lvsd/lvsd/agent/config/servicesdir"
	"github.com/lvsd/lvsd/cluster/configsync"
)

// localFile is a service file the operator put in the services directory.
type localFile struct {
	path  string
	mtime int64 // Unix nanoseconds: the version it is published with
	size  int64
	data  []byte // nil when too large to publish
}

// isLocalEvent reports whether an inotify event may concern one of the
// operator's service files.
func (s *Syncer) isLocalEvent(ev fsnotify.Event) bool {
	name := filepath.Clean(ev.Name)
	return filepath.Dir(name) == filepath.Clean(s.cfg.Dir) && servicesdir.IsServiceFile(filepath.Base(name))
}

// scan reads the operator's service files that changed since the last
// scan, publishes them (on a source) and tombstones the ones gone.
func (s *Syncer) scan() {
	entries, err := os.ReadDir(s.cfg.Dir)
	if err != nil {
		s.log.Warn("config sync: reading the services directory", "err", err)
		return
	}
	seen := map[string]bool{}
	for _, e := range entries {
		name := e.Name()
		path := filepath.Join(s.cfg.Dir, name)
		if !servicesdir.IsServiceFile(name) || s.isManagedLink(name) {
			continue
		}
		fi, err := os.Stat(path)
		if err != nil || !fi.Mode().IsRegular() {
			continue // the agent's loader says what is wrong with it
		}
		seen[name] = true
		old, had := s.local[name]
		if had && old.mtime == fi.ModTime().UnixNano() && old.size == fi.Size() {
			continue
		}
		lf := localFile{path: path, mtime: fi.ModTime().UnixNano(), size: fi.Size()}
		if err := configsync.CheckName(name); err == nil && fi.Size() <= configsync.MaxData {
			lf.data, err = readAtMost(path, configsync.MaxData)
			if err != nil {
				s.log.Warn("config sync: reading a service file", "file", path, "err", err)
				continue
			}
		} else if s.publishes {
			s.log.Warn("config sync: not publishing a service file", "file", path, "size", fi.Size(), "max", configsync.MaxData)
		}
		s.local[name] = lf
		s.localChanged(name)
	}
	for name := range s.local {
		if !seen[name] {
			delete(s.local, name)
			s.localChanged(name)
		}
	}
	// A source that restarted, or whose file went while it was down,
	// learns of its own publications from its kept records: the ones
	// without a file any more are withdrawn.
	if s.publishes {
		for _, name := range s.store.Names() {
			if r := s.store.Get(name); r.Publisher == s.cfg.Node && !r.Deleted && s.local[name].path == "" {
				s.localChanged(name)
			}
		}
	}
}

func readAtMost(path string, n int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, n+1))
	if err == nil && int64(len(data)) > n {
		err = fmt.Errorf("is larger than %d bytes", n)
	}
	return data, err
}

// localChanged publishes what changed of the operator's file name: its new
// content, or its removal; a director that does not publish applies the
// record it keeps instead, which a local file no longer hides.
func (s *Syncer) localChanged(name string) {
	lf, present := s.local[name]
	if !s.publishes || present && lf.data == nil {
		s.apply(name)
		return
	}
	cur := s.store.Get(name)
	r := configsync.Record{Publisher: s.cfg.Node, Name: name, Path: lf.path}
	switch {
	case present:
		if cur != nil && cur.Publisher == s.cfg.Node && !cur.Deleted && bytes.Equal(cur.Data, lf.data) {
			return // published already (touched, or kept from before a restart)
		}
		r.Version, r.Data = uint64(lf.mtime), lf.data
		if cur != nil && cur.Publisher == s.cfg.Node && cur.Version >= r.Version {
			r.Version = cur.Version + 1 // a file put back with an older time is still this director's newest
		}
	case cur == nil || cur.Publisher != s.cfg.Node || cur.Deleted:
		s.apply(name) // not this director's to withdraw
		return
	default:
		r.Deleted, r.Path = true, cur.Path
		r.Version = max(uint64(time.Now().UnixNano()), cur.Version+1)
	}
	wire, err := configsync.EncodeRecord(r, s.cfg.Keys)
	if err != nil {
		s.log.Warn("config sync: cannot publish", "file", lf.path, "err", err)
		return
	}
	rec := r
	rec.Wire = wire
	if !s.take(&rec, false) {
		winner := s.store.Get(name)
		if winner == nil {
			return // refused, and logged, by take
		}
		msg := fmt.Sprintf("this director's file (version %d) is older than %s's publication (version %d): %s's is distributed, this director keeps its own",
			r.Version, winner.Publisher, winner.Version, winner.Publisher)
		s.log.Warn("config sync: a local file lost to another director's publication", "file", lf.path, "kept", winner.Publisher)
		s.setConflict(name, msg)
		return
	}
	s.log.Info("config sync: publishing", "file", name, "version", r.Version, "deleted", r.Deleted, "peers", len(s.cfg.Transport.ConfigPeers()))
	s.broadcast(wire)
}
