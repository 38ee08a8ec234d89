package config

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/lvsd/lvsd/agent/config/yamldoc"
	"github.com/lvsd/lvsd/agent/program"
)

// MaxFileSize bounds every file lvsd reads as configuration (the agent
// file, service files, key and CA files): a larger one is refused before it
// is parsed, so no file can make `lvsd check` or a reload slow or big.
const MaxFileSize = 1 << 20

// readFile reads a configuration file. Only a regular file is read: the
// file is opened without blocking (a named pipe would otherwise block
// open(2) until a writer appears, and then SIGTERM could not stop lvsd)
// and checked with fstat before any read. The error says what is wrong in
// an operator's words, without Go's "open ...:" wrapping.
func readFile(path string) ([]byte, error) {
	return readChecked(path, nil)
}

// readChecked is readFile with a check of the opened file's metadata
// before it is read (the file read is the file checked).
func readChecked(path string, check func(fs.FileInfo) error) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOCTTY, 0)
	if err != nil {
		return nil, FileError(err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, FileError(err)
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("is %s, not a regular file", KindOfFile(fi.Mode()))
	}
	if check != nil {
		if err := check(fi); err != nil {
			return nil, err
		}
	}
	if fi.Size() > MaxFileSize {
		return nil, fmt.Errorf("is %s, larger than the %s lvsd reads", byteSize(fi.Size()), byteSize(MaxFileSize))
	}
	// The size may grow between fstat and the read: read one byte more
	// than allowed to notice.
	data, err := io.ReadAll(io.LimitReader(f, MaxFileSize+1))
	if err != nil {
		return nil, FileError(err)
	}
	if len(data) > MaxFileSize {
		return nil, fmt.Errorf("is larger than the %s lvsd reads", byteSize(MaxFileSize))
	}
	return data, nil
}

// trustedFile refuses, under strict modes, a configuration file that
// anyone but root may write, or that is in a directory anyone but root may
// write; fi is what fstat said of the opened file. seen may be nil.
func trustedFile(path string, fi fs.FileInfo, seen *program.Seen) *Error {
	err := program.CheckFile(path, fi)
	if err == nil {
		real, rerr := filepath.EvalSymlinks(path)
		if rerr != nil {
			real = path
		}
		err = program.CheckDirs(path, filepath.Dir(real), program.Read, seen)
	}
	if err != nil {
		return &Error{File: path, Msg: strings.TrimPrefix(err.Error(), path+": ")}
	}
	return nil
}

// ReadServiceFile reads a service file (readFile), refusing, under strict
// modes, one that anyone but root may write (trustedFile). seen remembers
// the directories one load checked; it may be nil.
func ReadServiceFile(path string, strict bool, seen *program.Seen) ([]byte, error) {
	if !strict {
		return readFile(path)
	}
	return readChecked(path, func(fi fs.FileInfo) error {
		if e := trustedFile(path, fi, seen); e != nil {
			return errors.New(e.Msg)
		}
		return nil
	})
}

// FileError drops the operation and path Go puts in front of a system
// error: the caller names the file itself.
func FileError(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		err = pe.Err
	}
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return errors.New("does not exist")
	case errors.Is(err, fs.ErrPermission):
		return errors.New("cannot be read: permission denied")
	case errors.Is(err, syscall.EISDIR):
		return errors.New("is a directory, not a regular file")
	}
	return fmt.Errorf("cannot be read: %v", err)
}

// KindOfFile names a non-regular file type.
func KindOfFile(m fs.FileMode) string {
	switch {
	case m.IsDir():
		return "a directory"
	case m&fs.ModeNamedPipe != 0:
		return "a named pipe"
	case m&fs.ModeSocket != 0:
		return "a socket"
	case m&fs.ModeCharDevice != 0:
		return "a character device"
	case m&fs.ModeDevice != 0:
		return "a block device"
	}
	return "not a regular file"
}

func byteSize(n int64) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d bytes", n)
}

// PlaceDirError reports a problem with the services directory itself where
// the agent file names it (services_dir, or where it would be).
func (a *Agent) PlaceDirError(errs List) List {
	at := a.servicesDirAt
	if at == nil {
		return errs
	}
	for i, e := range errs {
		if e.File == a.ServicesDir {
			where := *at
			where.Msg = "services_dir " + e.File + " " + strings.TrimPrefix(e.Msg, "services directory ")
			if at.Line == 0 {
				where.Msg = "services_dir (by default " + e.File + ") " + strings.TrimPrefix(e.Msg, "services directory ")
			}
			errs[i] = &where
		}
	}
	return errs
}

// ParseServices parses and validates the services of a service file, data
// its content; laxModes: strict_modes is off. The checks between services
// are servicesdir's, which reads the files.
func ParseServices(file string, data []byte, errs *List, laxModes bool) []Service {
	var out []Service
	eachDoc(file, data, errs, func(d *doc) {
		d.laxModes = laxModes
		if name := d.TextAt("$.service"); name != "" {
			d.Prefix = fmt.Sprintf("service %q: ", yamldoc.Cut(name))
		}
		before := len(*errs)
		var raw rawService
		d.Decode(&raw)
		svc := d.service(raw)
		if len(*errs) == before {
			out = append(out, svc)
		}
	})
	return out
}
