// Package owner hands calls to the one goroutine that owns a piece of
// state (the BFD sessions, the BGP speaker's routes and peers), so that no
// other goroutine touches it.
package owner

import "context"

// Calls is the request channel of an owner goroutine, which runs each
// function it receives.
type Calls chan func()

// Do runs f on the owner goroutine and returns its error. It returns
// stopped once done is closed (the owner has ended), and ctx's error when
// ctx ends first (f may then still run).
func (c Calls) Do(ctx context.Context, done <-chan struct{}, stopped error, f func() error) error {
	errc := make(chan error, 1)
	select {
	case c <- func() { errc <- f() }:
	case <-done:
		return stopped
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}
