package program

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

// Program is an opened program file, checked and ready to run: what runs
// is the file that was checked, even if the path is made to name another
// file meanwhile (no stat-then-exec race).
type Program struct {
	Path string // as configured
	file *os.File
}

// Open opens the program at path and checks the opened file: a regular
// file with an execute bit; with strict, also writable by root alone, in
// directories writable by root alone (CheckFile, CheckDirs). Close it
// after the run.
func Open(path string, strict bool) (*Program, error) {
	if !filepath.IsAbs(path) {
		return nil, fmt.Errorf("%q is not an absolute path", path)
	}
	f, err := openProgram(path)
	if err != nil {
		return nil, fmt.Errorf("%s: %v", path, unwrap(err))
	}
	p := &Program{Path: path, file: f}
	if err := p.check(strict); err != nil {
		f.Close()
		return nil, err
	}
	return p, nil
}

func (p *Program) check(strict bool) error {
	fi, err := p.file.Stat()
	if err != nil {
		return fmt.Errorf("%s: %v", p.Path, unwrap(err))
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("%s is not a regular file", p.Path)
	}
	if fi.Mode().Perm()&0o111 == 0 {
		return fmt.Errorf("%s is not executable (mode %04o): chmod 755", p.Path, fi.Mode().Perm())
	}
	if !strict {
		return nil
	}
	if err := CheckFile(p.Path, fi); err != nil {
		return err
	}
	// The directories of the file opened, wherever symbolic links led.
	return CheckDirs(p.Path, filepath.Dir(realPath(p.file, p.Path)), Run, nil)
}

// Check reports why path may not be run (Open), without running it.
func Check(path string, strict bool) error {
	p, err := Open(path, strict)
	if err != nil {
		return err
	}
	return p.Close()
}

// Command returns the command running the opened program with args.
func (p *Program) Command(ctx context.Context, args ...string) *exec.Cmd {
	return p.command(ctx, args)
}

// Close closes the program file; the command started keeps its own copy.
func (p *Program) Close() error { return p.file.Close() }
