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
		_, err := loadServiceFiles(filepath.Join(dir, "svc.yaml"))
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
	_, err := loadServiceFiles(p)
	if want := p + ": is 1024.1 KiB, larger than the 1 MiB lvsd reads"; err == nil || err.Error() != want {
		t.Errorf("got %v, want %s", err, want)
	}
	// Exactly 1 MiB is read.
	p = writeFile(t, dir, "max.yaml", svcGood+strings.Repeat("#", MaxFileSize-len(svcGood)))
	if _, err := loadServiceFiles(p); err != nil {
		t.Errorf("a file of 1 MiB: %v", err)
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
