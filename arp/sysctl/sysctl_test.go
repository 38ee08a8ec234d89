package sysctl

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
)

func TestProcSys(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	conf := filepath.Join(root, "net/ipv4/conf/eth0.100")
	if err := os.MkdirAll(conf, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(conf, "arp_ignore"), []byte("0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	p := ProcSys{Root: root}
	key := ConfKey("eth0.100", "arp_ignore") // a dot in the interface name needs no escaping
	if v, err := p.Get(ctx, key); err != nil || v != "0" {
		t.Fatalf("Get = %q, %v; want 0 without newline", v, err)
	}
	if err := p.Set(ctx, key, "1"); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(conf, "arp_ignore")); string(b) != "1\n" {
		t.Fatalf("file holds %q after Set, want \"1\\n\"", b)
	}
	missing := ConfKey("eth9", "arp_ignore")
	if _, err := p.Get(ctx, missing); !errors.Is(err, ErrMissing) {
		t.Errorf("Get of a missing key: %v, want ErrMissing", err)
	}
	if err := p.Set(ctx, missing, "1"); !errors.Is(err, ErrMissing) {
		t.Errorf("Set of a missing key: %v, want ErrMissing", err)
	}
	if _, err := os.Stat(filepath.Join(root, missing)); err == nil {
		t.Errorf("Set created the missing key")
	}
	for _, bad := range []string{"", "/etc/passwd", "net/../../etc/passwd", "net//ipv4"} {
		if _, err := p.Get(ctx, bad); err == nil {
			t.Errorf("Get(%q) succeeded, want an error", bad)
		}
	}
}

func TestConfKeyDevice(t *testing.T) {
	for key, want := range map[string]string{
		ConfKey("all", "rp_filter"):  "all",
		ConfKey("eth0.5", "arp_ign"): "eth0.5",
		"net/ipv4/ip_forward":        "",
	} {
		if got := ConfKeyDevice(key); got != want {
			t.Errorf("ConfKeyDevice(%q) = %q, want %q", key, got, want)
		}
	}
}

func TestFakeBehavesLikeProc(t *testing.T) {
	ctx := context.Background()
	f := NewFakeConf("eth0")
	if err := f.Set(ctx, ConfKey("eth0", "arp_ignore"), "1"); err != nil {
		t.Fatal(err)
	}
	if err := f.Set(ctx, ConfKey("eth1", "arp_ignore"), "1"); !errors.Is(err, ErrMissing) {
		t.Errorf("writing a key of a missing interface: %v, want ErrMissing", err)
	}
	f.SetReadOnly(ConfKey("all", "arp_ignore"))
	if err := f.Set(ctx, ConfKey("all", "arp_ignore"), "1"); !errors.Is(err, ErrReadOnly) {
		t.Errorf("writing a read-only key: %v, want ErrReadOnly", err)
	}
	f.Put(ConfKey("lo", "rp_filter"), "1") // another program: no op recorded
	if ops := f.Ops(); !slices.Equal(ops, []string{"set net/ipv4/conf/eth0/arp_ignore=1"}) {
		t.Errorf("ops = %q", ops)
	}
	f.RemoveInterface("eth0")
	if _, err := f.Get(ctx, ConfKey("eth0", "arp_ignore")); !errors.Is(err, ErrMissing) {
		t.Errorf("key of a removed interface: %v, want ErrMissing", err)
	}
}

// Every way a key can fail has its kind, whatever the implementation: the
// agent advises by kind (modprobe, a read-only /proc/sys), not by text.
func TestErrorKinds(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "net/ipv4"), 0o755); err != nil {
		t.Fatal(err)
	}
	fake := NewFake(map[string]string{"net/ipv4/ip_forward": "0"})
	fake.SetReadOnly("net/ipv4/ip_forward")
	for _, tc := range []struct {
		name string
		err  error
		kind error // nil: neither kind
		text string
	}{
		{"fake: missing on read", second(fake.Get(ctx, "net/ipv4/vs/conntrack")), ErrMissing, "sysctl net/ipv4/vs/conntrack: not found"},
		{"fake: missing on write", fake.Set(ctx, "net/ipv4/vs/conntrack", "1"), ErrMissing, "sysctl net/ipv4/vs/conntrack: not found"},
		{"fake: read-only", fake.Set(ctx, "net/ipv4/ip_forward", "1"), ErrReadOnly,
			"setting sysctl net/ipv4/ip_forward=1: read-only file system"},
		{"proc: missing on read", second(ProcSys{Root: root}.Get(ctx, "net/ipv4/vs/conntrack")), ErrMissing, "sysctl net/ipv4/vs/conntrack: not found"},
		{"proc: missing on write", ProcSys{Root: root}.Set(ctx, "net/ipv4/vs/conntrack", "1"), ErrMissing, "not found"},
		{"EROFS", &Error{Key: "k", Value: "1", Set: true, Err: &fs.PathError{Op: "open", Path: "/proc/sys/k", Err: syscall.EROFS}},
			ErrReadOnly, "setting sysctl k=1: open /proc/sys/k: read-only file system"},
		{"EPERM", &Error{Key: "k", Value: "1", Set: true, Err: &fs.PathError{Op: "write", Path: "/proc/sys/k", Err: syscall.EPERM}},
			ErrReadOnly, "operation not permitted"},
		{"EINVAL", &Error{Key: "k", Value: "x", Set: true, Err: &fs.PathError{Op: "write", Path: "/proc/sys/k", Err: syscall.EINVAL}},
			nil, "setting sysctl k=x: write /proc/sys/k: invalid argument"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var e *Error
			if !errors.As(tc.err, &e) {
				t.Fatalf("%v (%T) is no *Error", tc.err, tc.err)
			}
			for _, kind := range []error{ErrMissing, ErrReadOnly} {
				if got := errors.Is(tc.err, kind); got != (kind == tc.kind) {
					t.Errorf("errors.Is(%v, %v) = %v", tc.err, kind, got)
				}
			}
			if !strings.Contains(tc.err.Error(), tc.text) {
				t.Errorf("text %q, want %q in it", tc.err, tc.text)
			}
		})
	}
}

// The real /proc/sys: a key that does not exist is ErrMissing, and one
// the kernel lets nobody write (mode 0444, even for root) is ErrReadOnly.
// Neither changes anything on the host.
func TestProcSysErrorKinds(t *testing.T) {
	ctx := context.Background()
	p := ProcSys{}
	if _, err := p.Get(ctx, "kernel/no_such_sysctl_here"); !errors.Is(err, ErrMissing) {
		t.Errorf("reading a missing key: %v, want ErrMissing", err)
	}
	const readOnly = "fs/file-nr" // the kernel's count of open files, mode 0444
	if _, err := os.Stat("/proc/sys/" + readOnly); err != nil {
		t.Skipf("no /proc/sys/%s here: %v", readOnly, err)
	}
	if err := p.Set(ctx, readOnly, "0"); !errors.Is(err, ErrReadOnly) {
		t.Errorf("writing %s: %v, want ErrReadOnly", readOnly, err)
	}
}

func second(_ string, err error) error { return err }
