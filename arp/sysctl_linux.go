package arp

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
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

var _ Sysctls = ProcSys{}

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

// Get implements Sysctls.
func (p ProcSys) Get(ctx context.Context, key string) (string, error) {
	if err := ctx.Err(); err != nil {
		return "", err
	}
	path, err := p.path(key)
	if err != nil {
		return "", err
	}
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("sysctl %s: %w", key, ErrNotFound)
	}
	if err != nil {
		return "", fmt.Errorf("reading sysctl %s: %w", key, err)
	}
	return string(bytes.TrimSpace(b)), nil
}

// Set implements Sysctls.
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
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("sysctl %s: %w", key, ErrNotFound)
	}
	if err != nil {
		return fmt.Errorf("setting sysctl %s=%s: %w", key, value, err)
	}
	// One write: the kernel parses each write to a sysctl on its own.
	_, err = f.Write([]byte(value + "\n"))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("setting sysctl %s=%s: %w", key, value, err)
	}
	return nil
}
