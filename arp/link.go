package arp

import (
	"context"
	"sync"
)

// LinkWatcher follows whether a network interface can carry traffic: it is
// administratively up and has its carrier (operational state up, or
// unknown for devices that report none). Implementations must be safe for
// concurrent use.
type LinkWatcher interface {
	// WatchLink sends dev's state on the returned channel — once at once,
	// then at every change — until ctx ends, and then closes it. A missing
	// dev counts as down. Only the latest state matters: a receiver that
	// falls behind may miss intermediate ones.
	WatchLink(ctx context.Context, dev string) (<-chan bool, error)
}

// FakeLinks is a LinkWatcher whose links an test sets up and down.
// Links not set are up.
type FakeLinks struct {
	mu       sync.Mutex
	down     map[string]bool
	watchers map[string][]chan bool
}

var _ LinkWatcher = (*FakeLinks)(nil)

// WatchLink implements LinkWatcher.
func (f *FakeLinks) WatchLink(ctx context.Context, dev string) (<-chan bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.watchers == nil {
		f.watchers = map[string][]chan bool{}
	}
	ch := make(chan bool, 1)
	ch <- !f.down[dev]
	f.watchers[dev] = append(f.watchers[dev], ch)
	go func() {
		<-ctx.Done()
		f.mu.Lock()
		defer f.mu.Unlock()
		for i, w := range f.watchers[dev] {
			if w == ch {
				f.watchers[dev] = append(f.watchers[dev][:i], f.watchers[dev][i+1:]...)
				break
			}
		}
		close(ch)
	}()
	return ch, nil
}

// Set sets dev up or down and tells its watchers.
func (f *FakeLinks) Set(dev string, up bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.down == nil {
		f.down = map[string]bool{}
	}
	if f.down[dev] == !up {
		return
	}
	f.down[dev] = !up
	for _, ch := range f.watchers[dev] {
		sendLatest(ch, up)
	}
}

// sendLatest puts state in ch (capacity 1), replacing a state not yet
// received.
func sendLatest(ch chan bool, state bool) {
	for {
		select {
		case ch <- state:
			return
		default:
		}
		select {
		case <-ch:
		default:
		}
	}
}
