package config

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
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
		return nil, fileError(err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fileError(err)
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("is %s, not a regular file", kindOfFile(fi.Mode()))
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
		return nil, fileError(err)
	}
	if len(data) > MaxFileSize {
		return nil, fmt.Errorf("is larger than the %s lvsd reads", byteSize(MaxFileSize))
	}
	return data, nil
}

// fileError drops the operation and path Go puts in front of a system
// error: the caller names the file itself.
func fileError(err error) error {
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

// kindOfFile names a non-regular file type.
func kindOfFile(m fs.FileMode) string {
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

// serviceFiles lists the service files of dir in name order: every entry
// named *.yaml or *.yml whose name does not start with a dot (editors'
// swap and lock files do). Such an entry that is not a regular file (after
// following symbolic links) is an error, not skipped: an operator who put
// it there meant it to be read.
func serviceFiles(dir string) ([]string, List) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		var pe *fs.PathError
		if errors.As(err, &pe) && errors.Is(pe.Err, syscall.ENOTDIR) {
			err = errors.New("is not a directory")
		} else {
			err = fileError(err)
		}
		return nil, List{{File: dir, Msg: "services directory " + err.Error()}}
	}
	var files []string
	var errs List
	for _, e := range entries {
		name := e.Name()
		if strings.HasPrefix(name, ".") || !(strings.HasSuffix(name, ".yaml") || strings.HasSuffix(name, ".yml")) {
			continue
		}
		path := filepath.Join(dir, name)
		fi, err := os.Stat(path)
		switch {
		case err != nil:
			errs = append(errs, &Error{File: path, Msg: fileError(err).Error()})
		case !fi.Mode().IsRegular():
			errs = append(errs, &Error{File: path, Msg: fmt.Sprintf("is %s, not a regular file: lvsd reads only regular files from the services directory", kindOfFile(fi.Mode()))})
		default:
			files = append(files, path)
		}
	}
	slices.Sort(files)
	return files, errs
}
