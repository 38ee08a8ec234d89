package program

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"syscall"
)

// Strict modes, as OpenSSH's StrictModes: lvsd runs as root, so whoever
// can change a file it reads as configuration or a program it runs can
// run code as root. A file, and every directory on its path up to /, must
// be writable by root alone: owned by root (or, when lvsd does not run as
// root, by the account it runs as), and writable by neither its group nor
// others. The operator may turn this off (strict_modes: false).

// Use is what lvsd does with a checked path.
type Use int

// Uses.
const (
	// Read: a configuration file or directory. A sticky directory others
	// may write to (/tmp) is accepted above it: there only an entry's
	// owner may rename or remove it.
	Read Use = iota
	// Run: a program. No directory above it may be writable by others,
	// sticky or not.
	Run
)

// fixHint ends every refusal: what the operator can do.
const fixHint = "only root may be able to write files lvsd runs or reads as root"

// CheckFile refuses the file at path whose metadata (from fstat of the
// opened file, so that the file checked is the file used) is fi, when
// anyone but root may write it.
func CheckFile(path string, fi fs.FileInfo) error {
	if why, fix := unsafeMode(fi, false); why != "" {
		return fmt.Errorf("%s: %s; %s — %s, or set strict_modes: false", path, why, fixHint, fix)
	}
	return nil
}

// CheckDirs refuses path when a directory above it, up to /, may be
// written by anyone but root: that one could replace it. dir is where the
// file is (its symbolic links are followed, and the directories of the
// target are checked); seen, when not nil, remembers the directories
// already checked (one load checks thousands of files in a few).
func CheckDirs(path, dir string, use Use, seen *Seen) error {
	real, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return fmt.Errorf("%s: %v", path, unwrap(err))
	}
	for d := real; ; d = filepath.Dir(d) {
		if err := seen.check(d, use); err != nil {
			return fmt.Errorf("%s: in %s, which %w", path, d, err)
		}
		if d == filepath.Dir(d) {
			return nil
		}
	}
}

// CheckDir refuses a directory lvsd reads (the services directory): it
// must be writable by root alone, and so must every directory above it.
func CheckDir(dir string, seen *Seen) error {
	real, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return fmt.Errorf("%s: %v", dir, unwrap(err))
	}
	fi, err := os.Stat(real)
	if err != nil {
		return fmt.Errorf("%s: %v", dir, unwrap(err))
	}
	if err := CheckFile(dir, fi); err != nil {
		return err
	}
	if real == filepath.Dir(real) {
		return nil
	}
	return CheckDirs(dir, filepath.Dir(real), Read, seen)
}

// Seen remembers the directories checked, for one load. Safe for
// concurrent use; the zero value and nil are ready (nil remembers nothing).
type Seen struct {
	mu   sync.Mutex
	dirs map[seenKey]error
}

type seenKey struct {
	dir string
	use Use
}

func (s *Seen) check(dir string, use Use) error {
	if s == nil {
		return checkDir(dir, use)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	k := seenKey{dir, use}
	if err, ok := s.dirs[k]; ok {
		return err
	}
	err := checkDir(dir, use)
	if s.dirs == nil {
		s.dirs = map[seenKey]error{}
	}
	s.dirs[k] = err
	return err
}

// checkDir is the verdict on one directory above a file; its error reads
// after "in <dir>, which".
func checkDir(dir string, use Use) error {
	fi, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("cannot be checked: %v", unwrap(err))
	}
	if why, fix := unsafeMode(fi, use == Read); why != "" {
		return fmt.Errorf("is %s; %s — %s %s, or set strict_modes: false", why, fixHint, fix, dir)
	}
	return nil
}

// unsafeMode says why fi may be written by another account than root (""
// when it may not) and the command that fixes it. stickyOK accepts a
// sticky directory others may write to.
func unsafeMode(fi fs.FileInfo, stickyOK bool) (why, fix string) {
	mode := fi.Mode().Perm()
	shown := uint32(mode)
	sticky := fi.Mode()&fs.ModeSticky != 0
	if sticky {
		shown |= 0o1000
	}
	uid, gid := -1, -1
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		uid, gid = int(st.Uid), int(st.Gid)
	}
	switch {
	case uid != 0 && uid != os.Geteuid():
		return fmt.Sprintf("owned by uid %d (mode %04o)", uid, shown), "chown root"
	case sticky && stickyOK && fi.IsDir():
		return "", ""
	case mode&0o002 != 0:
		return fmt.Sprintf("writable by everyone (mode %04o)", shown), "chmod o-w"
	case mode&0o020 != 0:
		return fmt.Sprintf("writable by group %d (mode %04o)", gid, shown), "chmod g-w"
	}
	return "", ""
}

// unwrap drops the operation and path Go puts in front of a system error:
// the message names the file itself.
func unwrap(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}
