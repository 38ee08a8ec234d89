package hooks

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestCheckProgram(t *testing.T) {
	dir := t.TempDir()
	open := filepath.Join(dir, "open")
	if err := os.Mkdir(open, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(open, 0o777); err != nil { // past the umask
		t.Fatal(err)
	}
	file := func(dir, name string, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte("#!/bin/sh\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, tc := range []struct {
		name, path, err string
	}{
		{"fine", file(dir, "ok", 0o755), ""},
		{"owner only", file(dir, "owner", 0o700), ""},
		{"relative", "hooks/notify", "is not an absolute path"},
		{"missing", filepath.Join(dir, "nope"), "no such file or directory"},
		{"directory", dir, "is not a regular file"},
		{"not executable", file(dir, "plain", 0o644), "is not executable (mode 0644): chmod 755"},
		{"world-writable", file(dir, "ww", 0o757), "writable by its group or others (mode 0757)"},
		{"group-writable", file(dir, "gw", 0o775), "writable by its group or others (mode 0775)"},
		{"in an open directory", file(open, "hook", 0o755), "which others may write to (mode 0777)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := CheckProgram(tc.path)
			switch {
			case tc.err == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
				t.Fatalf("error %v, want one with %q", err, tc.err)
			}
		})
	}
}
