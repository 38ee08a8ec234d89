package sysctl

import (
	"context"
	"fmt"
	"io/fs"
	"maps"
	"sync"
	"syscall"
)

// Fake keeps sysctls in memory and behaves like /proc/sys: only keys it
// was created with (or that AddInterface made) exist, and its errors are
// the kinds ProcSys returns (ErrMissing, ErrReadOnly).
type Fake struct {
	mu       sync.Mutex // guards all following fields
	values   map[string]string
	readOnly map[string]bool
	ops      []string
}

var _ Interface = (*Fake)(nil)

// NewFake returns a fake holding initial (copied).
func NewFake(initial map[string]string) *Fake {
	return &Fake{values: maps.Clone(initial), readOnly: map[string]bool{}}
}

// NewFakeConf returns a fake with the IPv4 conf keys arp_ignore,
// arp_announce and rp_filter of "all", "default", "lo" and devs, all 0, as
// a fresh Linux network namespace has them.
func NewFakeConf(devs ...string) *Fake {
	f := NewFake(nil)
	for _, d := range append([]string{"all", "default", "lo"}, devs...) {
		f.AddInterface(d)
	}
	return f
}

// AddInterface creates the conf keys of dev with value 0, as the kernel
// does when an interface appears.
func (f *Fake) AddInterface(dev string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.values == nil {
		f.values = map[string]string{}
	}
	for _, p := range []string{"arp_ignore", "arp_announce", "rp_filter"} {
		f.values[ConfKey(dev, p)] = "0"
	}
}

// RemoveInterface deletes the conf keys of dev, as when it goes away.
func (f *Fake) RemoveInterface(dev string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for k := range f.values {
		if ConfKeyDevice(k) == dev {
			delete(f.values, k)
		}
	}
}

// SetReadOnly makes writes to key fail with ErrReadOnly (EROFS), as
// /proc/sys does in a container.
func (f *Fake) SetReadOnly(key string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.readOnly[key] = true
}

// Put changes a value without recording an op, as another program would.
func (f *Fake) Put(key, value string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.values[key] = value
}

// Values returns a copy of every key and value.
func (f *Fake) Values() map[string]string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return maps.Clone(f.values)
}

// Ops returns the writes made so far ("set KEY=VALUE") and forgets them.
func (f *Fake) Ops() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	ops := f.ops
	f.ops = nil
	return ops
}

// Get implements Interface.
func (f *Fake) Get(ctx context.Context, key string) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	v, ok := f.values[key]
	if !ok {
		return "", &Error{Key: key, Err: fs.ErrNotExist}
	}
	return v, nil
}

// Set implements Interface.
func (f *Fake) Set(ctx context.Context, key, value string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.values[key]; !ok {
		return &Error{Key: key, Value: value, Set: true, Err: fs.ErrNotExist}
	}
	if f.readOnly[key] {
		return &Error{Key: key, Value: value, Set: true, Err: syscall.EROFS}
	}
	f.ops = append(f.ops, fmt.Sprintf("set %s=%s", key, value))
	f.values[key] = value
	return nil
}
