package nat

import (
	"context"
	"sync"
)

// Fake keeps lvsd's tables in memory. It behaves like Kernel: Apply writes
// only when the digest differs, Remove of missing tables succeeds.
type Fake struct {
	mu       sync.Mutex // guards all following fields
	current  *Ruleset   // nil: no tables
	applied  []Ruleset  // every ruleset written, in order
	applies  int        // Apply calls, written or skipped
	removes  int
	failNext error
	tampered bool // the tables exist but were edited by hand
	watchers []chan struct{}
}

var _ Interface = (*Fake)(nil)

// NewFake returns a Fake without tables.
func NewFake() *Fake { return &Fake{} }

// Apply implements Interface.
func (f *Fake) Apply(ctx context.Context, rs Ruleset) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.applies++
	if err := f.fail(); err != nil {
		return err
	}
	if rs.Tables() == nil {
		return errZeroRuleset
	}
	if f.current != nil && f.current.Digest() == rs.Digest() && !f.tampered {
		return nil
	}
	f.current = &rs
	f.tampered = false
	f.applied = append(f.applied, rs)
	return nil
}

// Installed implements Interface.
func (f *Fake) Installed(ctx context.Context) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.fail(); err != nil {
		return "", err
	}
	if f.current == nil {
		return "", nil
	}
	if f.tampered {
		return "", nil
	}
	return f.current.Digest(), nil
}

// Remove implements Interface.
func (f *Fake) Remove(ctx context.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.removes++
	if err := f.fail(); err != nil {
		return err
	}
	f.current = nil
	f.tampered = false
	return nil
}

// Current returns the ruleset the fake tables hold; ok is false when there
// are no tables.
func (f *Fake) Current() (rs Ruleset, ok bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.current == nil {
		return Ruleset{}, false
	}
	return *f.current, true
}

// Applied returns every ruleset actually written (skipped Applies are not
// listed) and forgets them.
func (f *Fake) Applied() []Ruleset {
	f.mu.Lock()
	defer f.mu.Unlock()
	a := f.applied
	f.applied = nil
	return a
}

// Calls returns how many times Apply and Remove were called.
func (f *Fake) Calls() (applies, removes int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.applies, f.removes
}

// FailNext makes the next call return err and change nothing.
func (f *Fake) FailNext(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.failNext = err
}

// Tamper simulates someone editing lvsd's tables by hand: they still exist
// but Installed no longer recognises them, so the next Apply rewrites them.
func (f *Fake) Tamper() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.current != nil {
		f.tampered = true
	}
}

// Watch implements Watcher: the channel receives at every Flush.
func (f *Fake) Watch(ctx context.Context) (<-chan struct{}, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	ch := make(chan struct{}, 1)
	f.watchers = append(f.watchers, ch)
	return ch, nil
}

// Flush simulates `nft flush ruleset` by someone else: the tables are gone
// and the watchers are told.
func (f *Fake) Flush() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.current, f.tampered = nil, false
	for _, ch := range f.watchers {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

func (f *Fake) fail() error {
	err := f.failNext
	f.failNext = nil
	return err
}
