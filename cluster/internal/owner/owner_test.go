package owner

import (
	"context"
	"errors"
	"testing"
)

func TestDo(t *testing.T) {
	calls, done := make(Calls), make(chan struct{})
	stopped := errors.New("stopped")
	owned := 0 // touched by the owner goroutine only
	go func() {
		for f := range calls {
			f()
		}
		close(done)
	}()
	ctx := context.Background()
	for i := 1; i <= 3; i++ {
		if err := calls.Do(ctx, done, stopped, func() error { owned++; return nil }); err != nil {
			t.Fatal(err)
		}
	}
	boom := errors.New("boom")
	var seen int
	if err := calls.Do(ctx, done, stopped, func() error { seen = owned; return boom }); err != boom || seen != 3 {
		t.Fatalf("Do = %v, saw %d", err, seen)
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	blocked := make(Calls) // nobody reads it
	if err := blocked.Do(cancelled, nil, stopped, func() error { return nil }); err != context.Canceled {
		t.Errorf("cancelled: %v", err)
	}
	close(calls)
	<-done
	if err := blocked.Do(ctx, done, stopped, func() error { return nil }); err != stopped {
		t.Errorf("after the owner ended: %v", err)
	}
}
