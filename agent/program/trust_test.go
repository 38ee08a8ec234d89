package program

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The refusal table of strict modes: a file lvsd reads, a directory it
// reads, a program it runs, each with its owner, its mode and the mode of
// the directory it is in.
func TestStrictModesTable(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("giving a file to another user needs root")
	}
	// base: a folder only root may write to, under /tmp (sticky, which a
	// program may not be under: such rows use base only as a file or a
	// directory would).
	type kind int
	const (
		file kind = iota
		dir
		prog
	)
	kinds := map[kind]string{file: "file", dir: "dir", prog: "program"}
	rows := []struct {
		name   string
		owner  int
		mode   os.FileMode
		parent os.FileMode // the mode of the folder it is in
		err    string      // "" accepted
	}{
		{"owner root", 0, 0o755, 0o755, ""},
		{"owner another user", 1000, 0o755, 0o755, "owned by uid 1000 (mode 0755)"},
		{"0644", 0, 0o644, 0o755, ""},
		{"0664", 0, 0o664, 0o755, "writable by group 0 (mode 0664)"},
		{"0666", 0, 0o666, 0o755, "writable by everyone (mode 0666)"},
		{"0775", 0, 0o775, 0o755, "writable by group 0 (mode 0775)"},
		{"0777", 0, 0o777, 0o755, "writable by everyone (mode 0777)"},
		{"parent group-writable", 0, 0o755, 0o775, "which is writable by group 0 (mode 0775)"},
		{"parent world-writable and sticky", 0, 0o755, 0o777 | os.ModeSticky, "which is writable by everyone (mode 1777)"},
	}
	for _, row := range rows {
		for _, k := range []kind{file, dir, prog} {
			t.Run(kinds[k]+"/"+row.name, func(t *testing.T) {
				// A program is placed outside /tmp, which strict modes
				// refuse above one: in a folder under the package's.
				base := t.TempDir()
				if k == prog {
					var err error
					if base, err = os.MkdirTemp(".", "strict-"); err != nil {
						t.Fatal(err)
					}
					t.Cleanup(func() { os.RemoveAll(base) })
					if base, err = filepath.Abs(base); err != nil {
						t.Fatal(err)
					}
					if err := os.Chmod(base, 0o755); err != nil {
						t.Fatal(err)
					}
					if err := CheckDirs(base, base, Run, nil); err != nil {
						t.Skipf("the package's folder is not root's alone: %v", err)
					}
				}
				parent := filepath.Join(base, "parent")
				if err := os.Mkdir(parent, 0o755); err != nil {
					t.Fatal(err)
				}
				p := filepath.Join(parent, "it")
				if k == dir {
					if err := os.Mkdir(p, 0o755); err != nil {
						t.Fatal(err)
					}
				} else if err := os.WriteFile(p, []byte("#!/bin/sh\nexit 0\n"), 0o755); err != nil {
					t.Fatal(err)
				}
				mode, want := row.mode, row.err
				if k == prog {
					// A program has execute bits; its modes are those.
					mode |= 0o111
					want = strings.Replace(want, fmt.Sprintf("%04o", row.mode), fmt.Sprintf("%04o", mode), 1)
				}
				if row.parent&os.ModeSticky != 0 && k != prog {
					want = "" // sticky: only root may replace root's entry
				}
				for path, mode := range map[string]os.FileMode{p: mode, parent: row.parent} {
					if err := os.Chmod(path, mode); err != nil {
						t.Fatal(err)
					}
				}
				if err := os.Chown(p, row.owner, -1); err != nil {
					t.Fatal(err)
				}
				check := func(strict bool) error {
					switch k {
					case file:
						f, err := os.Open(p)
						if err != nil {
							t.Fatal(err)
						}
						defer f.Close()
						fi, err := f.Stat()
						if err != nil {
							t.Fatal(err)
						}
						if !strict {
							return nil
						}
						if err := CheckFile(p, fi); err != nil {
							return err
						}
						return CheckDirs(p, parent, Read, nil)
					case dir:
						if !strict {
							return nil
						}
						return CheckDir(p, nil)
					}
					return Check(p, strict)
				}
				err := check(true)
				switch {
				case want == "" && err != nil:
					t.Fatalf("refused: %v", err)
				case want != "" && (err == nil || !strings.Contains(err.Error(), want)):
					t.Fatalf("error %v, want one with %q", err, want)
				case err != nil && (!strings.HasPrefix(err.Error(), p+": ") || !strings.HasSuffix(err.Error(), "or set strict_modes: false")):
					t.Errorf("error %q does not start with the path and end with the opt-out", err)
				}
				if err := check(false); err != nil {
					t.Errorf("strict_modes false: %v", err)
				}
			})
		}
	}
}

// What a program must be, strict modes or not.
func TestProgramBasics(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte("#!/bin/sh\n"), mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, tc := range []struct{ name, path, err string }{
		{"fine", write("ok", 0o755), ""},
		{"relative", "hooks/notify", "is not an absolute path"},
		{"missing", filepath.Join(dir, "nope"), "no such file or directory"},
		{"directory", dir, "is not a regular file"},
		{"not executable", write("plain", 0o644), "is not executable (mode 0644): chmod 755"},
	} {
		err := Check(tc.path, false)
		if tc.err == "" && err != nil || tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)) {
			t.Errorf("%s: error %v, want %q", tc.name, err, tc.err)
		}
	}
}

// The file run is the file opened and checked: replacing the path after
// the check runs the checked program, not the new one.
func TestProgramRunsTheFileChecked(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "prog")
	out := filepath.Join(dir, "out")
	if err := os.WriteFile(p, []byte("#!/bin/sh\necho checked > "+out+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	prog, err := Open(p, false)
	if err != nil {
		t.Fatal(err)
	}
	defer prog.Close()
	swap := filepath.Join(dir, "swap")
	if err := os.WriteFile(swap, []byte("#!/bin/sh\necho swapped > "+out+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(swap, p); err != nil {
		t.Fatal(err)
	}
	if b, err := prog.Command(context.Background()).CombinedOutput(); err != nil {
		t.Fatalf("%v: %s", err, b)
	}
	if b, _ := os.ReadFile(out); string(b) != "checked\n" {
		t.Errorf("ran %q", b)
	}
}
