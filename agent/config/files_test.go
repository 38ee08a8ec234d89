package config

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A named pipe in the services directory neither blocks the loader (open
// would wait for a writer) nor is read: it is reported, and so are the
// other entries that are not regular files.
func TestServicesDirOnlyRegularFiles(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "web.yaml", svcGood)
	writeFile(t, dir, ".web.yaml.swp", "not yaml: [")
	writeFile(t, dir, "notes.txt", "not yaml: [")
	if err := syscall.Mkfifo(filepath.Join(dir, "pipe.yaml"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "dir.yml"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("nowhere.yaml", filepath.Join(dir, "dangling.yaml")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("web.yaml", filepath.Join(dir, "link.yaml")); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := LoadServices(dir)
		done <- err
	}()
	var err error
	select {
	case err = <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("LoadServices blocked on a named pipe")
	}
	got := strings.ReplaceAll(err.Error(), dir+"/", "")
	want := "dangling.yaml: does not exist\n" +
		"dir.yml: is a directory, not a regular file: lvsd reads only regular files from the services directory\n" +
		"pipe.yaml: is a named pipe, not a regular file: lvsd reads only regular files from the services directory\n" +
		// The symbolic link is read: web is defined twice.
		"web.yaml:1:1: service \"web\" is already defined at link.yaml:1\n" +
		"web.yaml:1:1: service \"web\": tcp 10.0.0.50 port 80 is already served by service \"web\" (link.yaml:1)"
	if got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
}

// A file swapped for a pipe after the directory was listed, and a pipe
// given as the agent file or as a key file, are not waited on either.
func TestPipesNeverBlock(t *testing.T) {
	dir := t.TempDir()
	for _, name := range []string{"svc.yaml", "lvsd.yaml", "cluster.key"} {
		if err := syscall.Mkfifo(filepath.Join(dir, name), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	done := make(chan string, 3)
	go func() {
		_, err := LoadServiceFiles(filepath.Join(dir, "svc.yaml"))
		done <- err.Error()
		_, err = LoadAgent(filepath.Join(dir, "lvsd.yaml"))
		done <- err.Error()
		_, err = ReadKeyFile(filepath.Join(dir, "cluster.key"))
		done <- err.Error()
	}()
	for _, want := range []string{
		dir + "/svc.yaml: is a named pipe, not a regular file",
		dir + "/lvsd.yaml: is a named pipe, not a regular file",
		"cluster key_file " + dir + "/cluster.key is a named pipe, not a regular file",
	} {
		select {
		case got := <-done:
			if got != want {
				t.Errorf("got %q, want %q", got, want)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("blocked on a named pipe")
		}
	}
}

func TestFileTooLarge(t *testing.T) {
	dir := t.TempDir()
	p := writeFile(t, dir, "big.yaml", svcGood+strings.Repeat("#", MaxFileSize))
	_, err := LoadServiceFiles(p)
	if want := p + ": is 1024.1 KiB, larger than the 1 MiB lvsd reads"; err == nil || err.Error() != want {
		t.Errorf("got %v, want %s", err, want)
	}
	// Exactly 1 MiB is read.
	p = writeFile(t, dir, "max.yaml", svcGood+strings.Repeat("#", MaxFileSize-len(svcGood)))
	if _, err := LoadServiceFiles(p); err != nil {
		t.Errorf("a file of 1 MiB: %v", err)
	}
}

// Problems with the services directory itself are reported where the
// agent file names it.
func TestServicesDirErrors(t *testing.T) {
	for _, c := range []struct{ name, agent, want string }{
		{"missing", "interface: eth0\nservices_dir: nope\n", "lvsd.yaml:2:15: services_dir DIR/nope does not exist"},
		{"a file", "interface: eth0\nservices_dir: lvsd.yaml\n", "lvsd.yaml:2:15: services_dir DIR/lvsd.yaml is not a directory"},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			a, err := LoadAgent(writeFile(t, dir, "lvsd.yaml", c.agent))
			if err != nil {
				t.Fatal(err)
			}
			_, err = a.LoadServices()
			want := strings.ReplaceAll(dir+"/"+c.want, "DIR", dir)
			if err == nil || err.Error() != want {
				t.Errorf("got %v\nwant %s", err, want)
			}
		})
	}
}

// Issue 14: a key file others may read, or owned by another user, is
// refused, naming file, mode and owner.
func TestKeyFilePrivate(t *testing.T) {
	dir := t.TempDir()
	p := writeKey(t, dir, "cluster.key", testKey+"\n")
	if _, err := ReadKeyFile(p); err != nil {
		t.Fatalf("mode 0600: %v", err)
	}
	uid := os.Geteuid()
	for _, mode := range []os.FileMode{0o640, 0o604, 0o620} {
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		_, err := ReadKeyFile(p)
		want := fmt.Sprintf("cluster key_file %s has mode %04o (owner uid %d): group and others must have no access (chmod 600)", p, mode, uid)
		if err == nil || err.Error() != want {
			t.Errorf("mode %04o: got %v\nwant %s", mode, err, want)
		}
	}
	if uid != 0 {
		t.Skip("changing a file's owner needs root")
	}
	if err := os.Chmod(p, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(p, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	_, err := ReadKeyFile(p)
	want := "cluster key_file " + p + " is owned by uid 65534, mode 0600: it must belong to root, or to the account lvsd runs as (chown root)"
	if err == nil || err.Error() != want {
		t.Errorf("got %v\nwant %s", err, want)
	}
	// Through the agent file: at the key.
	got := agentErrors(t, "interface: eth0\ncluster:\n  key_file: "+p+"\n")
	if want := "lvsd.yaml:3:13: " + want; got != want {
		t.Errorf("got %s\nwant %s", got, want)
	}
}
