package servicesdir

import (
	"crypto/sha256"
	"errors"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/lvsd/lvsd/agent/config"
	"github.com/lvsd/lvsd/agent/config/yamldoc"
	"github.com/lvsd/lvsd/agent/program"
)

// File is one service file as the loader last read it: its services, or
// the problems that kept them out. Its exported fields are never modified
// once made, so a reload tells the files that changed from those that did
// not by comparing pointers.
type File struct {
	Path     string
	Services []config.Service
	Problems config.List
	stamp    stamp
	sum      [sha256.Size]byte
	unread   bool // the read failed: not cached
	// acceptedIn is the last accepted set (Cache.accepted) the file was in.
	acceptedIn uint64
}

// appendServices appends pointers to f's services to dst: a set shares
// them with the file (and with the sets before it), so a reload copies a
// pointer a service, not the service.
func (f *File) appendServices(dst []*config.Service) []*config.Service {
	return appendPointers(dst, f.Services)
}

func appendPointers(dst []*config.Service, services []config.Service) []*config.Service {
	for i := range services {
		dst = append(dst, &services[i])
	}
	return dst
}

// stamp is what a stat says of a file: a file whose stamp is the same has
// not been written since (ctime changes on every write, rename and chmod,
// and no tool can set it back).
type stamp struct {
	size         int64
	mtime, ctime int64 // nanoseconds
	ino, dev     uint64
}

func stampOf(fi fs.FileInfo) stamp {
	s := stamp{size: fi.Size(), mtime: fi.ModTime().UnixNano()}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		s.ctime = time.Unix(st.Ctim.Unix()).UnixNano()
		s.ino, s.dev = st.Ino, uint64(st.Dev)
	}
	return s
}

// Cache keeps the service files of a directory as last read, so that a
// reload costs what changed: a file is read again only when its stamp
// (size, times, inode) changed, and parsed again only when its content
// (SHA-256) did. It is not safe for concurrent use: one goroutine (the
// reconciler) owns it.
type Cache struct {
	files map[string]*File // by path
	// Stat and Read reach the file system; tests count them.
	Stat func(path string) (fs.FileInfo, error)
	Read func(path string) ([]byte, error)
	// ReadDir lists the directory on a full scan.
	ReadDir func(dir string) ([]fs.DirEntry, error)
	// order is every path of dir that may be in files, sorted: a reload of
	// a few files walks it instead of sorting every cached file again.
	order struct {
		dir   string
		paths []string
	}
	// accepted counts the sets assemble returned without problems; valid:
	// the last one did. Only the services of files not in the last set
	// need checking against the others (checkChanged).
	accepted struct {
		gen   uint64
		valid bool
	}
	// last is the last set accepted, for patch.
	last lastAccepted
	// strict: the agent's strict_modes, which the cached readings were
	// checked with; seen remembers the directories checked by one load.
	strict bool
	seen   *program.Seen
	// lastScan is the fingerprint of the last full scan (Scanned).
	lastScan struct {
		dir   string
		fp    Fingerprint
		valid bool
	}
}

// NewCache returns an empty cache on the real file system.
func NewCache() *Cache {
	c := &Cache{files: map[string]*File{}, Stat: os.Stat, ReadDir: os.ReadDir, strict: true}
	c.Read = c.readServiceFile
	return c
}

// readServiceFile reads a service file under the agent's strict_modes
// (config.ReadServiceFile).
func (c *Cache) readServiceFile(path string) ([]byte, error) {
	return config.ReadServiceFile(path, c.strict, c.seen)
}

// useModes starts a load under the agent's strict_modes. A change of the
// setting drops every cached reading: they were checked under the other
// one.
func (c *Cache) useModes(strict bool) {
	c.seen = &program.Seen{}
	if strict == c.strict {
		return
	}
	c.strict = strict
	c.files = map[string]*File{}
	c.order.dir, c.order.paths = "", nil
	c.accepted.valid = false
	c.last.valid = false
}

// checkDir refuses, under strict modes, a services directory that anyone
// but root may write, or that is in one (program.CheckDir).
func (c *Cache) checkDir(dir string) config.List {
	if !c.strict {
		return nil
	}
	if _, err := os.Stat(dir); err != nil {
		return nil // the scan says what is wrong with it
	}
	if err := program.CheckDir(dir, c.seen); err != nil {
		return config.List{{File: dir, Msg: "services directory is " + strings.TrimPrefix(err.Error(), dir+": ")}}
	}
	return nil
}

// Set is the services of a directory as one reading: every file in name
// order, and their services as one validated set.
type Set struct {
	Files    []*File           // by path
	Services []*config.Service // into the files' Services: shared, never modified
	// Fresh are the indexes in Services of the services of the files a
	// load of a few changed ones read again (nil after a full load).
	Fresh []int
	// Replaced are the readings of the last set those files replaced or
	// removed (nil after a full load).
	Replaced []*File
}

// Load reads the services directory of agent a: a full scan when changed is
// nil (list the directory, stat every file), else only the paths in changed
// (files created, written, renamed or deleted since the last Load) and the
// rest as cached. It returns the files and the validated set, or every
// problem found; the cache keeps what it read either way.
func (c *Cache) Load(a *config.Agent, changed []string) (Set, error) {
	c.lastScan.valid = false
	c.useModes(!a.LaxModes)
	dir := a.ServicesDir
	if errs := c.checkDir(dir); errs != nil {
		c.accepted.valid = false
		c.keepAccepted(dir, Set{}, errs)
		return Set{}, a.PlaceDirError(errs)
	}
	if changed != nil && c.last.valid && c.accepted.valid && c.last.dir == dir {
		if set, ok, err := c.patch(dir, changed); ok {
			return set, err
		}
	}
	files, errs := c.scan(dir, changed)
	set, err := c.assemble(files, a.PlaceDirError(errs))
	c.keepAccepted(dir, set, err)
	return set, err
}

// LoadDir is Load for a directory named directly, always a full scan.
func (c *Cache) LoadDir(dir string) (Set, error) {
	c.lastScan.valid = false
	c.seen = &program.Seen{}
	if errs := c.checkDir(dir); errs != nil {
		c.accepted.valid = false
		c.keepAccepted(dir, Set{}, errs)
		return Set{}, errs
	}
	set, err := c.assemble(c.scan(dir, nil))
	c.keepAccepted(dir, set, err)
	return set, err
}

// candidate is a service file to read, with what a stat said of it (nil:
// not stat'ed yet), or its reading when it is known not to have changed.
type candidate struct {
	path      string
	fi        fs.FileInfo
	unchanged *File
}

// scan returns the service files of dir in name order, with the problems of
// the directory and of entries that are not regular files. With changed,
// only those paths are looked at; the others are the cached files of dir,
// taken as they are.
func (c *Cache) scan(dir string, changed []string) ([]candidate, config.List) {
	if changed == nil {
		return c.serviceFiles(dir)
	}
	dirty := make(map[string]bool, len(changed))
	for _, p := range changed {
		dirty[p] = true
	}
	stale, _, errs := c.statChanged(dir, dirty) // dirty, to read again
	slices.SortFunc(stale, byPath)
	if c.order.dir != dir {
		c.sortCached(dir)
	}
	isDirty := config.NamesOf(dirty)
	files := make([]candidate, 0, len(c.order.paths)+len(stale))
	order := make([]string, 0, len(c.order.paths)+len(stale))
	for _, p := range c.order.paths {
		for len(stale) > 0 && stale[0].path < p {
			files, order, stale = append(files, stale[0]), append(order, stale[0].path), stale[1:]
		}
		if len(stale) > 0 && stale[0].path == p {
			continue // the loop above takes it next
		}
		order = append(order, p)
		if f := c.files[p]; f != nil && !isDirty.Has(p) {
			files = append(files, candidate{path: p, unchanged: f})
		}
	}
	for _, cand := range stale {
		files, order = append(files, cand), append(order, cand.path)
	}
	c.order.paths = order
	return files, errs
}

func byPath(a, b candidate) int { return strings.Compare(a.path, b.path) }

// statChanged stats the paths of dirty that name service files of dir:
// those there, to read again; those gone (removed, or renamed away), which
// leave the cache; and what is wrong with entries that are no regular
// file.
func (c *Cache) statChanged(dir string, dirty map[string]bool) (stale []candidate, gone []string, errs config.List) {
	for p := range dirty {
		if filepath.Dir(p) != dir || !IsServiceFile(filepath.Base(p)) {
			continue
		}
		fi, err := c.Stat(p)
		if errors.Is(err, fs.ErrNotExist) && !isLink(p) {
			delete(c.files, p)
			gone = append(gone, p)
			continue
		}
		if e := checkEntry(p, fi, err); e != nil {
			errs = append(errs, e)
			continue
		}
		stale = append(stale, candidate{path: p, fi: fi})
	}
	return stale, gone, errs
}

// sortCached makes order the sorted paths of dir's cached files.
func (c *Cache) sortCached(dir string) {
	c.order.dir, c.order.paths = dir, c.order.paths[:0]
	for p := range c.files {
		if filepath.Dir(p) == dir {
			c.order.paths = append(c.order.paths, p)
		}
	}
	slices.Sort(c.order.paths)
}

// serviceFiles lists the service files of dir in name order: every entry
// named *.yaml or *.yml whose name does not start with a dot (editors'
// swap and lock files do). Such an entry that is not a regular file (after
// following symbolic links) is an error, not skipped: an operator who put
// it there meant it to be read. Cached files no longer listed are dropped.
func (c *Cache) serviceFiles(dir string) ([]candidate, config.List) {
	fp := newFingerprinter()
	var files []candidate
	var errs config.List
	listed := map[string]bool{}
	err := c.listServiceFiles(dir, fp, func(path string, fi fs.FileInfo, err error) {
		if f := c.files[path]; f != nil {
			// The cached reading's string: the listing's own would be a
			// second copy of every path kept after a full reload (0.8 MB
			// at 10,000 files).
			path = f.Path
		}
		listed[path] = true
		if e := checkEntry(path, fi, err); e != nil {
			errs = append(errs, e)
			return
		}
		files = append(files, candidate{path: path, fi: fi})
	})
	if err != nil {
		c.lastScan.dir, c.lastScan.fp, c.lastScan.valid = dir, fp.sum(), true
		var pe *fs.PathError
		if errors.As(err, &pe) && errors.Is(pe.Err, syscall.ENOTDIR) {
			err = errors.New("is not a directory")
		} else {
			err = config.FileError(err)
		}
		return nil, config.List{{File: dir, Msg: "services directory " + err.Error()}}
	}
	for p := range c.files {
		if filepath.Dir(p) == dir && !listed[p] {
			delete(c.files, p)
		}
	}
	c.lastScan.dir, c.lastScan.fp, c.lastScan.valid = dir, fp.sum(), true
	slices.SortFunc(files, byPath)
	c.order.dir, c.order.paths = dir, slices.Sorted(maps.Keys(listed))
	return files, errs
}

// checkEntry says what is wrong with a directory entry that is no regular
// file, from its stat.
func checkEntry(path string, fi fs.FileInfo, err error) *config.Error {
	switch {
	case err != nil:
		return &config.Error{File: path, Msg: config.FileError(err).Error()}
	case !fi.Mode().IsRegular():
		return &config.Error{File: path, Msg: "is " + config.KindOfFile(fi.Mode()) + ", not a regular file: lvsd reads only regular files from the services directory"}
	}
	return nil
}

// isLink reports whether p is a symbolic link: a dangling one stats as
// missing, but it is an entry an operator put there.
func isLink(p string) bool {
	fi, err := os.Lstat(p)
	return err == nil && fi.Mode()&fs.ModeSymlink != 0
}

// IsServiceFile reports whether a file so named in the services directory
// is read: *.yaml or *.yml, not hidden.
func IsServiceFile(name string) bool {
	return !strings.HasPrefix(name, ".") && (strings.HasSuffix(name, ".yaml") || strings.HasSuffix(name, ".yml"))
}

// assemble reads the files not cached or changed, and validates the whole
// set. Past yamldoc.MaxProblems no further file is read.
func (c *Cache) assemble(files []candidate, errs config.List) (Set, error) {
	set := Set{Files: make([]*File, 0, len(files))}
	n := 0
	for start := 0; start < len(files) && len(errs) < yamldoc.MaxProblems; start += readBatch {
		for _, f := range c.readings(files[start:min(start+readBatch, len(files))]) {
			if len(errs) >= yamldoc.MaxProblems {
				break
			}
			set.Files = append(set.Files, f)
			errs = append(errs, f.Problems...)
			n += len(f.Services)
		}
	}
	set.Services = make([]*config.Service, 0, n)
	var fresh []int // services not in the set the last assemble accepted
	for _, f := range set.Files {
		if !c.accepted.valid || f.acceptedIn != c.accepted.gen {
			for i := range f.Services {
				fresh = append(fresh, len(set.Services)+i)
			}
		}
		set.Services = f.appendServices(set.Services)
	}
	checkConflicts(set.Services, fresh, len(errs) == 0 && c.accepted.valid, nil, &errs)
	c.accepted.valid = len(errs) == 0
	if len(errs) > 0 {
		return Set{}, errs
	}
	c.accepted.gen++
	for _, f := range set.Files {
		f.acceptedIn = c.accepted.gen
	}
	return set, nil
}

// readBatch is how many candidates assemble takes at a time: the files among
// them that must be read are read and parsed in parallel.
const readBatch = 256

// readings returns the readings of cands in their order: cached, or read and
// parsed again, the latter on every CPU at once when there are enough of
// them (a cold start of 10,000 files spent most of its start-up parsing
// YAML, one file after the other). Only reading and parsing run in
// parallel; the cache itself changes here, on the caller's goroutine.
func (c *Cache) readings(cands []candidate) []*File {
	out := make([]*File, len(cands))
	var toRead []int
	for i, cand := range cands {
		if f, ok := c.cached(cand); ok {
			out[i] = f
		} else {
			toRead = append(toRead, i)
		}
	}
	workers := min(runtime.GOMAXPROCS(0), len(toRead)/minPerWorker)
	if workers <= 1 {
		for _, i := range toRead {
			out[i] = c.read(cands[i])
		}
	} else {
		var wg sync.WaitGroup
		next := atomic.Int64{}
		for range workers {
			wg.Go(func() {
				for j := int(next.Add(1)) - 1; j < len(toRead); j = int(next.Add(1)) - 1 {
					out[toRead[j]] = c.read(cands[toRead[j]])
				}
			})
		}
		wg.Wait()
	}
	for _, i := range toRead {
		c.keep(cands[i].path, out[i])
	}
	return out
}

// minPerWorker keeps a handful of changed files on one goroutine: a
// one-file reload reads its file where it runs.
const minPerWorker = 16

// cached returns the cached reading of a candidate whose stamp is the
// same (ok false: it must be read).
func (c *Cache) cached(cand candidate) (*File, bool) {
	if cand.unchanged != nil {
		return cand.unchanged, true
	}
	old := c.files[cand.path]
	if old == nil {
		return nil, false
	}
	fi := cand.fi
	if fi == nil {
		fi, _ = c.Stat(cand.path) // a failure shows in the read
	}
	if fi != nil && stampOf(fi) == old.stamp {
		return old, true
	}
	return nil, false
}

// read reads and parses a candidate, or returns the cached reading, newly
// stamped, when only its stamp changed (touched, not written). It leaves
// the cache as it is: it runs on several goroutines at once (keep stores).
func (c *Cache) read(cand candidate) *File {
	fi := cand.fi
	if fi == nil {
		fi, _ = c.Stat(cand.path)
	}
	var st stamp
	if fi != nil {
		st = stampOf(fi)
	}
	data, err := c.Read(cand.path)
	if err != nil {
		return &File{Path: cand.path, Problems: config.List{{File: cand.path, Msg: err.Error()}}, unread: true}
	}
	sum := sha256.Sum256(data)
	if old := c.files[cand.path]; old != nil && old.sum == sum {
		old.stamp = st // touched, not changed: the same reading (only this goroutine has this path)
		return old
	}
	f := &File{Path: cand.path, stamp: st, sum: sum}
	f.Services = config.ParseServices(cand.path, data, &f.Problems, !c.strict)
	return f
}

// keep stores a reading in the cache; one that failed to read drops the
// path from it.
func (c *Cache) keep(path string, f *File) {
	if f.unread {
		delete(c.files, path)
		return
	}
	c.files[path] = f
}
