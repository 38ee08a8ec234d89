package topo

import (
	"errors"
	"fmt"
	"os"
	"runtime"

	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// rootNS is the network namespace the process started in. It is captured
// during package initialisation, which runs on the locked main thread before
// any goroutine of ours could have moved a thread elsewhere; later,
// /proc/self/ns/net could name a namespace the main thread was parked in.
var rootNS, rootNSErr = netns.Get()

// errGoexit reports that f ended its goroutine (t.FailNow, runtime.Goexit)
// instead of returning.
var errGoexit = errors.New("topo: function called runtime.Goexit inside a namespace (t.FailNow from a non-test goroutine?)")

// onThread runs f on a fresh goroutine locked to its OS thread; enter moves
// that thread into the wanted namespace first. Afterwards the thread goes
// back to rootNS and is unlocked; if that fails the thread stays locked, so
// the runtime destroys it when the goroutine ends instead of reusing a thread
// in the wrong namespace. A panic in f is re-raised in the caller.
func onThread(enter func() error, f func() error) error {
	if rootNSErr != nil {
		return fmt.Errorf("topo: cannot open the original network namespace: %w", rootNSErr)
	}
	type result struct {
		err      error
		panicked bool
		value    any
	}
	ch := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		res := result{err: errGoexit}
		// Deferred first so it also reports a Goexit inside f.
		defer func() { ch <- res }()
		defer func() {
			if v := recover(); v != nil {
				res = result{panicked: true, value: v}
			}
			if unix.Setns(int(rootNS), unix.CLONE_NEWNET) == nil {
				runtime.UnlockOSThread()
			}
		}()
		if err := enter(); err != nil {
			res.err = err
			return
		}
		res.err = f()
	}()
	r := <-ch
	if r.panicked {
		panic(r.value)
	}
	return r.err
}

// inNS runs f on a thread inside the namespace ns.
func inNS(ns netns.NsHandle, f func() error) error {
	return onThread(func() error {
		if err := netns.Set(ns); err != nil {
			return fmt.Errorf("setns: %w", err)
		}
		return nil
	}, f)
}

// newNamedNS creates a network namespace bound at /run/netns/name, as
// `ip netns add` does, and runs f inside it. The returned handle keeps the
// namespace reachable until it is closed.
func newNamedNS(name string, f func() error) (netns.NsHandle, error) {
	ns := netns.None()
	err := onThread(func() error {
		h, err := netns.NewNamed(name)
		if err != nil {
			// NewNamed leaves the file behind when the bind mount fails;
			// an existing file (EEXIST) is someone else's.
			if !errors.Is(err, os.ErrExist) {
				_ = os.Remove("/run/netns/" + name)
			}
			return fmt.Errorf("create netns %s: %w", name, err)
		}
		ns = h
		return nil
	}, f)
	if err != nil && ns.IsOpen() {
		ns.Close()
		_ = netns.DeleteNamed(name)
		return netns.None(), err
	}
	return ns, err
}
