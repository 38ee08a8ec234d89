package servicesdir

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"hash"
	"io/fs"
	"path/filepath"
)

// Fingerprint hashes what stats say of files (path, size, times, inode):
// files whose fingerprint is the same were not written in between.
type Fingerprint [sha256.Size]byte

// fingerprinter adds files' stamps, in order, to a Fingerprint.
type fingerprinter struct {
	h   hash.Hash
	buf []byte
}

func newFingerprinter() *fingerprinter { return &fingerprinter{h: sha256.New()} }

func (f *fingerprinter) add(path string, s stamp) {
	f.buf = append(append(f.buf[:0], path...), 0)
	for _, v := range []uint64{uint64(s.size), uint64(s.mtime), uint64(s.ctime), s.ino, s.dev} {
		f.buf = binary.LittleEndian.AppendUint64(f.buf, v)
	}
	f.h.Write(f.buf)
}

// addError adds a directory that could not be listed (one that does not
// exist adds nothing: it has no files).
func (f *fingerprinter) addError(err error) {
	if !errors.Is(err, fs.ErrNotExist) {
		f.h.Write([]byte("error " + err.Error() + "\x00"))
	}
}

func (f *fingerprinter) sum() Fingerprint {
	var s Fingerprint
	f.h.Sum(s[:0])
	return s
}

// FileFingerprint stats one file (a file that cannot be stat'ed adds
// nothing).
func (c *Cache) FileFingerprint(path string) Fingerprint {
	f := newFingerprinter()
	if fi, err := c.Stat(path); err == nil {
		f.add(path, stampOf(fi))
	}
	return f.sum()
}

// DirFingerprint lists dir and stats its service files (IsServiceFile), as
// a full Load does, and changes nothing: a scan for edits inotify cannot
// see.
func (c *Cache) DirFingerprint(dir string) Fingerprint {
	f := newFingerprinter()
	c.listServiceFiles(dir, f, func(string, fs.FileInfo, error) {})
	return f.sum()
}

// listServiceFiles lists dir and stats each of its service files
// (IsServiceFile), in directory order, adding what it finds to fp and
// handing each to each: the listing a full Load and DirFingerprint share,
// so that their fingerprints agree.
func (c *Cache) listServiceFiles(dir string, fp *fingerprinter, each func(path string, fi fs.FileInfo, err error)) error {
	entries, err := c.ReadDir(dir)
	if err != nil {
		fp.addError(err)
		return err
	}
	for _, e := range entries {
		if !IsServiceFile(e.Name()) {
			continue
		}
		path := filepath.Join(dir, e.Name())
		fi, err := c.Stat(path)
		if err == nil {
			fp.add(path, stampOf(fi))
		}
		each(path, fi, err)
	}
	return nil
}

// Scanned returns the DirFingerprint of dir as the last full Load's stats
// found it: a reload of every file need not stat them all again to know
// what the next scan must compare with. ok is false when that Load scanned
// another directory, or none.
func (c *Cache) Scanned(dir string) (fp Fingerprint, ok bool) {
	if c.lastScan.dir != dir || !c.lastScan.valid {
		return Fingerprint{}, false
	}
	return c.lastScan.fp, true
}
