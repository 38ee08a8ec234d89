package toa

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"
)

// KernelRealServer is the real server's side in the kernel.
type KernelRealServer struct {
	dir  string
	objs realServerObjects
	// newMaps says maps of another layout were replaced by new ones: every
	// link needs this build's programs, whatever their tags.
	newMaps bool
}

var _ RealServer = (*KernelRealServer)(nil)

// OpenRealServer loads the programs and adopts the maps pinned by a
// previous lvsd (its sockets keep their clients' addresses), or pins new
// ones. A pinned map whose layout this build changed is replaced, its
// backends and directors carried over where their key layout stayed;
// sockets that stored a client's address in a replaced toa_peers return
// the director's again (upgrade_linux.go).
func OpenRealServer(ctx context.Context, opts Options) (*KernelRealServer, error) {
	dir, err := pinFolder(opts.pinRoot(), "realserver")
	if err != nil {
		return nil, err
	}
	spec, err := loadRealServer()
	if err != nil {
		return nil, fmt.Errorf("toa: the real server's programs: %w", err)
	}
	carried, newMaps, err := newLayouts(spec, dir)
	if err != nil {
		return nil, err
	}
	r := &KernelRealServer{dir: dir, newMaps: newMaps}
	err = spec.LoadAndAssign(&r.objs, &ebpf.CollectionOptions{Maps: ebpf.MapOptions{PinPath: dir}})
	if err != nil {
		return nil, fmt.Errorf("toa: loading the real server's programs (pinned maps in %s): %w", dir, err)
	}
	err = errors.Join(putKeys(r.objs.ToaVips, carried[realServerMapToaVips]),
		putKeys(r.objs.ToaDirectors, carried[realServerMapToaDirectors]))
	if err != nil {
		r.objs.Close()
		return nil, err
	}
	return r, nil
}

// hooks are the three cgroup attachments, each pinned as a link by name.
func (r *KernelRealServer) hooks() []struct {
	pin    string
	attach ebpf.AttachType
	prog   *ebpf.Program
} {
	return []struct {
		pin    string
		attach ebpf.AttachType
		prog   *ebpf.Program
	}{
		{"link_sockops", ebpf.AttachCGroupSockOps, r.objs.ToaSockops},
		{"link_getpeername4", ebpf.AttachCgroupInet4GetPeername, r.objs.ToaGetpeername4},
		{"link_getpeername6", ebpf.AttachCgroupInet6GetPeername, r.objs.ToaGetpeername6},
	}
}

// Attach implements RealServer. A link a previous lvsd pinned on the same
// cgroup keeps its program when that is this build's (the same tag, on the
// same maps) and gets this lvsd's in place otherwise, atomically; one on
// another cgroup is detached first.
func (r *KernelRealServer) Attach(ctx context.Context, cgroupPath string) error {
	id, err := cgroupID(cgroupPath)
	if err != nil {
		return err
	}
	for _, h := range r.hooks() {
		pin := filepath.Join(r.dir, h.pin)
		if old, err := link.LoadPinnedLink(pin, nil); err == nil {
			same, current := false, false
			if info, err := old.Info(); err == nil {
				if cg := info.Cgroup(); cg != nil && cg.CgroupId == id {
					same = true
					current = !r.newMaps && sameProgram(info.Program, h.prog)
				}
			}
			if same {
				if !current {
					err = old.Update(h.prog)
				}
				old.Close()
				if err != nil {
					return fmt.Errorf("toa: updating %s: %w", pin, err)
				}
				continue
			}
			old.Unpin()
			old.Close()
		} else if !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("toa: reading the pinned link %s: %w", pin, err)
		}
		l, err := link.AttachCgroup(link.CgroupOptions{Path: cgroupPath, Attach: h.attach, Program: h.prog})
		if err != nil {
			return fmt.Errorf("toa: attaching to cgroup %s: %w", cgroupPath, err)
		}
		err = l.Pin(pin)
		l.Close()
		if err != nil {
			return fmt.Errorf("toa: pinning %s: %w", pin, err)
		}
	}
	return nil
}

// sameProgram reports whether the loaded program id has prog's tag: the
// same instructions.
func sameProgram(id ebpf.ProgramID, prog *ebpf.Program) bool {
	p, err := ebpf.NewProgramFromID(id)
	if err != nil {
		return false
	}
	defer p.Close()
	have, err1 := programTag(p)
	want, err2 := programTag(prog)
	return err1 == nil && err2 == nil && have == want
}

// cgroupID is the id the kernel gives a cgroup v2 folder: its inode.
func cgroupID(path string) (uint64, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return 0, fmt.Errorf("toa: cgroup %s: %w", path, err)
	}
	if st.Type != unix.CGROUP2_SUPER_MAGIC {
		return 0, fmt.Errorf("toa: %s is not a cgroup v2 folder", path)
	}
	var s unix.Stat_t
	if err := unix.Stat(path, &s); err != nil {
		return 0, fmt.Errorf("toa: cgroup %s: %w", path, err)
	}
	return s.Ino, nil
}

// SetServices implements RealServer.
func (r *KernelRealServer) SetServices(ctx context.Context, local []netip.AddrPort) error {
	keys, err := vipKeys(local)
	if err != nil {
		return err
	}
	return syncSet(r.objs.ToaVips, keys)
}

// SetDirectors implements RealServer.
func (r *KernelRealServer) SetDirectors(ctx context.Context, addrs []netip.Addr) error {
	keys, err := addrKeys(addrs)
	if err != nil {
		return err
	}
	return syncSet(r.objs.ToaDirectors, keys)
}

// Pinned implements RealServer: an open KernelRealServer has pinned its
// objects.
func (r *KernelRealServer) Pinned() bool { return true }

// Stats implements RealServer.
func (r *KernelRealServer) Stats(ctx context.Context) (RealServerStats, error) {
	return realServerStats(r.objs.ToaRealserverStats)
}

func realServerStats(m *ebpf.Map) (RealServerStats, error) {
	v, err := sumCounters(m, 4)
	if err != nil {
		return RealServerStats{}, err
	}
	return RealServerStats{Stored: v[0], NotDirector: v[1], NoOption: v[2], NoSYN: v[3]}, nil
}

// Remove implements RealServer: unpinning the links detaches the programs
// (this process holds them no longer). Sockets keep what they stored, but
// with the hooks gone nobody reads it.
func (r *KernelRealServer) Remove(ctx context.Context) error {
	var errs []error
	for _, h := range r.hooks() {
		pin := filepath.Join(r.dir, h.pin)
		l, err := link.LoadPinnedLink(pin, nil)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("toa: reading the pinned link %s: %w", pin, err))
			continue
		}
		errs = append(errs, l.Unpin(), l.Close())
	}
	errs = append(errs, unpinAll(r.dir, r.objs.ToaVips, r.objs.ToaDirectors, r.objs.ToaPeers, r.objs.ToaRealserverStats))
	return errors.Join(errs...)
}

// Close implements RealServer.
func (r *KernelRealServer) Close() error { return r.objs.Close() }
