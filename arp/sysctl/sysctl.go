// Package sysctl reads and writes kernel parameters below /proc/sys: the
// one writer of the sysctls that arp, nat and ipvs name (the ARP and
// rp_filter settings of an interface, forwarding, conntrack, the IPVS
// expiry and sync settings). The agents set them through it and show every
// change in their plans. Its errors say why a key cannot be set, by kind
// (ErrMissing, ErrReadOnly), so callers advise without reading error text.
// The stateful Fake behaves as /proc/sys does, for agent tests.
package sysctl

import (
	"context"
	"errors"
	"io/fs"
	"syscall"

	"github.com/lvsd/lvsd/arp/spec"
)

// Interface reads and writes kernel parameters below /proc/sys of the
// current network namespace. Keys are paths below /proc/sys with slashes
// ("net/ipv4/conf/eth0/arp_ignore"), so interface names containing dots
// need no escaping. Implementations must be safe for concurrent use.
type Interface interface {
	// Get returns the value without its trailing newline. A key that does
	// not exist (e.g. the conf folder of a missing interface) fails with an
	// error matching ErrMissing.
	Get(ctx context.Context, key string) (string, error)
	// Set writes value. It never creates a key: a missing one fails with an
	// error matching ErrMissing, as the kernel does.
	Set(ctx context.Context, key, value string) error
}

var (
	// ErrMissing is matched by the error about a key the kernel does not
	// have: its interface is gone, or the module that makes it (ip_vs,
	// nf_conntrack) is not loaded.
	ErrMissing = errors.New("no such sysctl")
	// ErrReadOnly is matched by the error about a key this process may not
	// write: /proc/sys mounted read-only (EROFS, as in a container) or the
	// write refused (EPERM, EACCES: no CAP_NET_ADMIN, or a key the kernel
	// never lets anyone write).
	ErrReadOnly = errors.New("sysctl is read-only here")
)

// Error is a failed read or write of one key. errors.Is tells its kind:
// ErrMissing, ErrReadOnly, or neither (Err says what).
type Error struct {
	Key   string
	Value string // the value being set; "" for a read
	Set   bool   // a write (Set) rather than a read (Get)
	Err   error  // the cause, as the file system reported it
}

func (e *Error) Error() string {
	switch {
	case errors.Is(e.Err, fs.ErrNotExist):
		return "sysctl " + e.Key + ": not found"
	case e.Set:
		return "setting sysctl " + e.Key + "=" + e.Value + ": " + e.Err.Error()
	}
	return "reading sysctl " + e.Key + ": " + e.Err.Error()
}

func (e *Error) Unwrap() error { return e.Err }

// Is reports whether the error is of kind target (ErrMissing, ErrReadOnly).
func (e *Error) Is(target error) bool {
	switch target {
	case ErrMissing:
		return errors.Is(e.Err, fs.ErrNotExist)
	case ErrReadOnly:
		return errors.Is(e.Err, syscall.EROFS) || errors.Is(e.Err, fs.ErrPermission)
	}
	return false
}

// ConfKey is the IPv4 per-interface key named param of dev ("all" for the
// setting the kernel combines with every interface's own one):
// ConfKey("eth0", "arp_ignore") is "net/ipv4/conf/eth0/arp_ignore".
func ConfKey(dev, param string) string { return spec.ConfKey(dev, param) }

// ConfKeyDevice returns the interface of a key made by ConfKey, or "" for
// any other key.
func ConfKeyDevice(key string) string { return spec.ConfKeyDevice(key) }
