package bfd

import "sync"

// subscribers are the functions Subscribe registered, called in no
// particular order for each change.
type subscribers struct {
	mu   sync.Mutex // guards all following fields
	fns  map[int]func(Change)
	next int
}

func (s *subscribers) add(fn func(Change)) (cancel func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fns == nil {
		s.fns = map[int]func(Change){}
	}
	id := s.next
	s.next++
	s.fns[id] = fn
	return func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		delete(s.fns, id)
	}
}

// notify calls every subscriber without holding the lock, so one may
// unsubscribe from inside.
func (s *subscribers) notify(c Change) {
	s.mu.Lock()
	fns := make([]func(Change), 0, len(s.fns))
	for _, fn := range s.fns {
		fns = append(fns, fn)
	}
	s.mu.Unlock()
	for _, fn := range fns {
		fn(c)
	}
}
