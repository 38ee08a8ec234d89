package servicesdir

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lvsd/lvsd/agent/config"
)

// strictDir is a folder only root may write to, with every folder above it
// but /tmp, which strict modes accept above a file lvsd reads (sticky).
func strictDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "services.d"), 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// Under strict modes (the default) a file lvsd reads as root is refused
// when anyone but root may write it; the error names the file, what is
// wrong and both ways out. strict_modes: false accepts it.
func TestStrictModesConfigFiles(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("changing a file's owner needs root")
	}
	const svc = "service: web\nvip: 10.0.0.50\nports: [80]\nbackends: [{address: 10.0.0.11}]\n"
	for _, tc := range []struct {
		name  string
		setup func(t *testing.T, dir string) // dir holds lvsd.yaml and services.d/web.yaml
		err   string
	}{
		{"all root's", func(*testing.T, string) {}, ""},
		{"group-writable service file", func(t *testing.T, dir string) {
			chmod(t, filepath.Join(dir, "services.d", "web.yaml"), 0o664)
		}, "services.d/web.yaml: writable by group 0 (mode 0664); only root may be able to write files lvsd runs or reads as root — chmod g-w, or set strict_modes: false"},
		{"service file of another user", func(t *testing.T, dir string) {
			chown(t, filepath.Join(dir, "services.d", "web.yaml"), 1000)
		}, "web.yaml: owned by uid 1000 (mode 0644)"},
		{"world-writable services directory", func(t *testing.T, dir string) {
			chmod(t, filepath.Join(dir, "services.d"), 0o777)
		}, "services_dir " + "%DIR%/services.d is writable by everyone (mode 0777)"},
		{"group-writable agent file", func(t *testing.T, dir string) {
			chmod(t, filepath.Join(dir, "lvsd.yaml"), 0o664)
		}, "lvsd.yaml: writable by group 0 (mode 0664)"},
		{"agent file in a group-writable folder", func(t *testing.T, dir string) {
			chmod(t, dir, 0o775)
		}, "lvsd.yaml: in %DIR%, which is writable by group 0 (mode 0775)"},
		{"exec check program under /tmp", func(t *testing.T, dir string) {
			prog := filepath.Join(dir, "check")
			if err := os.WriteFile(prog, []byte("#!/bin/sh\n"), 0o755); err != nil {
				t.Fatal(err)
			}
			writeFile(t, filepath.Join(dir, "services.d"), "web.yaml",
				svc+"health: {checks: [{type: exec, command: ["+prog+"]}]}\n")
		}, "check: in /tmp, which is writable by everyone (mode 1777)"},
	} {
		for _, lax := range []bool{false, true} {
			name := tc.name
			if lax {
				name += ", strict_modes false"
			}
			t.Run(name, func(t *testing.T) {
				dir := strictDir(t)
				agent := "node: d1\ninterface: eth0\nservices_dir: services.d\n"
				if lax {
					agent += "strict_modes: false\n"
				}
				writeFile(t, dir, "lvsd.yaml", agent)
				writeFile(t, filepath.Join(dir, "services.d"), "web.yaml", svc)
				tc.setup(t, dir)
				a, err := config.LoadAgent(filepath.Join(dir, "lvsd.yaml"))
				if err == nil {
					_, err = NewCache().Load(a, nil)
				}
				want := strings.ReplaceAll(tc.err, "%DIR%", dir)
				switch {
				case (want == "" || lax) && err != nil:
					t.Fatalf("refused: %v", err)
				case want != "" && !lax && (err == nil || !strings.Contains(err.Error(), want)):
					t.Fatalf("error %v, want one with %q", err, want)
				}
			})
		}
	}
}

// A reload that finds a file anyone may write is refused as a whole, and
// turning strict_modes on again reads the cached files again.
func TestStrictModesReload(t *testing.T) {
	dir := strictDir(t)
	services := filepath.Join(dir, "services.d")
	web := writeFile(t, services, "web.yaml", "service: web\nvip: 10.0.0.50\nports: [80]\nbackends: [{address: 10.0.0.11}]\n")
	c := NewCache()
	if _, err := c.Load(&config.Agent{ServicesDir: services}, nil); err != nil {
		t.Fatal(err)
	}
	chmod(t, web, 0o666)
	if _, err := c.Load(&config.Agent{ServicesDir: services}, []string{web}); err == nil || !strings.Contains(err.Error(), "writable by everyone (mode 0666)") {
		t.Fatalf("reload: %v", err)
	}
	if _, err := c.Load(&config.Agent{ServicesDir: services, LaxModes: true}, nil); err != nil {
		t.Fatalf("strict_modes false: %v", err)
	}
	if _, err := c.Load(&config.Agent{ServicesDir: services}, nil); err == nil {
		t.Fatal("strict again: the cached reading was taken")
	}
}

func chmod(t *testing.T, p string, mode os.FileMode) {
	t.Helper()
	if err := os.Chmod(p, mode); err != nil {
		t.Fatal(err)
	}
}

func chown(t *testing.T, p string, uid int) {
	t.Helper()
	if err := os.Chown(p, uid, -1); err != nil {
		t.Fatal(err)
	}
}
