package arp

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
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
	if _, err := p.Get(ctx, missing); !errors.Is(err, ErrNotFound) {
		t.Errorf("Get of a missing key: %v, want ErrNotFound", err)
	}
	if err := p.Set(ctx, missing, "1"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Set of a missing key: %v, want ErrNotFound", err)
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

func TestFakeSysctlsBehavesLikeProc(t *testing.T) {
	ctx := context.Background()
	f := NewFakeConf("eth0")
	if err := f.Set(ctx, ConfKey("eth0", "arp_ignore"), "1"); err != nil {
		t.Fatal(err)
	}
	if err := f.Set(ctx, ConfKey("eth1", "arp_ignore"), "1"); !errors.Is(err, ErrNotFound) {
		t.Errorf("writing a key of a missing interface: %v, want ErrNotFound", err)
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
	if _, err := f.Get(ctx, ConfKey("eth0", "arp_ignore")); !errors.Is(err, ErrNotFound) {
		t.Errorf("key of a removed interface: %v, want ErrNotFound", err)
	}
}
