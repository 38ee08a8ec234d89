package ipvs

import (
	"context"
	"fmt"
	"os"
	"runtime"

	"github.com/vishvananda/netns"
)

var (
	_ ConnectionLister = (*Kernel)(nil)
	_ ConnectionWalker = (*Kernel)(nil)
)

// Connections implements ConnectionLister: it parses the connection table of
// the Kernel's network namespace. /proc/thread-self/net is the namespace of
// the reading thread (/proc/net that of the process's main thread), so for
// another namespace the file is opened on a locked thread switched into it;
// the kernel keeps the namespace of the opener for the whole read.
func (k *Kernel) Connections(ctx context.Context) ([]Connection, error) {
	var out []Connection
	if err := k.EachConnection(ctx, func(c Connection) { out = append(out, c) }); err != nil {
		return nil, err
	}
	return out, nil
}

// EachConnection implements ConnectionWalker: Connections without keeping
// the table.
func (k *Kernel) EachConnection(ctx context.Context, each func(Connection)) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	f, err := openInNS(k.ns, "/proc/thread-self/net/ip_vs_conn")
	if err != nil {
		return fmt.Errorf("reading the IPVS connection table: %w", err)
	}
	defer f.Close()
	return ScanConnections(f, each)
}

// openInNS opens path with the calling thread in ns (None: as it is).
func openInNS(ns netns.NsHandle, path string) (*os.File, error) {
	if !ns.IsOpen() {
		return os.Open(path)
	}
	type result struct {
		f   *os.File
		err error
	}
	ch := make(chan result, 1)
	// A throw-away goroutine: if switching back fails its thread stays
	// locked and dies with it instead of serving others in the wrong netns.
	go func() {
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			ch <- result{nil, err}
			return
		}
		defer orig.Close()
		if err := netns.Set(ns); err != nil {
			ch <- result{nil, fmt.Errorf("entering the network namespace: %w", err)}
			return
		}
		f, err := os.Open(path)
		if netns.Set(orig) == nil {
			runtime.UnlockOSThread()
		}
		ch <- result{f, err}
	}()
	r := <-ch
	return r.f, r.err
}
