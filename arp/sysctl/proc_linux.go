package sysctl

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// ProcSys reads and writes sysctls through /proc/sys. /proc/sys/net resolves
// to the network namespace of the thread that opens the file, so a process
// started inside a namespace (as lvsd is) sees that namespace's values.
type ProcSys struct {
	// Root replaces /proc/sys, for tests.
	Root string
}

var _ Interface = ProcSys{}

func (p ProcSys) path(key string) (string, error) {
	// A key is a relative path below the root: "..", an absolute path or an
	// empty element could reach files that are not sysctls.
	if key == "" || strings.HasPrefix(key, "/") || strings.Contains(key, "//") {
		return "", fmt.Errorf("sysctl key %q is not a path below /proc/sys", key)
	}
	for _, el := range strings.Split(key, "/") {
		if el == "." || el == ".." {
			return "", fmt.Errorf("sysctl key %q is not a path below /proc/sys", key)
		}
	}
	root := p.Root
	if root == "" {
		root = "/proc/sys"
	}
	return filepath.Join(root, key), nil
}

// Get implements Interface.
func (p ProcSys) Get(ctx context.Context, key string) (string, error) {
	if err := ctx.Err(); err != nil {
		return "", err
	}
	path, err := p.path(key)
	if err != nil {
		return "", err
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "", &Error{Key: key, Err: err}
	}
	return string(bytes.TrimSpace(b)), nil
}

// Set implements Interface.
func (p ProcSys) Set(ctx context.Context, key, value string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	path, err := p.path(key)
	if err != nil {
		return err
	}
	// No O_CREATE: the kernel owns the set of keys, and a key that went away
	// (its interface was deleted) must be reported, not created in a test root.
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		return &Error{Key: key, Value: value, Set: true, Err: err}
	}
	// One write: the kernel parses each write to a sysctl on its own.
	_, err = f.Write([]byte(value + "\n"))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return &Error{Key: key, Value: value, Set: true, Err: err}
	}
	return nil
}
