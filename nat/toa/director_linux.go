package toa

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"

	"github.com/cilium/ebpf"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// The director's tc filter: its name finds it again on any interface, and
// its priority and handle let a new program replace the old one in place.
const (
	filterName     = "lvsd_toa"
	filterPriority = 0x4c54 // "LT"
	filterHandle   = 1
)

// DirectorOptions adds the network namespace of the interfaces to Options.
type DirectorOptions struct {
	Options
	NetNS netns.NsHandle // the interfaces' namespace; the caller's if zero
}

// KernelDirector is the director's side in the kernel.
type KernelDirector struct {
	dir  string
	objs directorObjects
	nl   *netlink.Handle
	// tag is the kernel's tag of objs.ToaDirector: a filter with another
	// runs another build's program.
	tag string
	// newMaps says maps of another layout were replaced by new ones: every
	// filter needs this program, whatever its tag (upgrade_linux.go).
	newMaps bool
}

var _ Director = (*KernelDirector)(nil)

// OpenDirector loads the program and adopts the maps pinned by a previous
// lvsd (their services and counters carry on), or pins new ones. A pinned
// map whose layout this build changed is replaced, its services carried
// over where their key layout stayed (upgrade_linux.go).
func OpenDirector(ctx context.Context, opts DirectorOptions) (*KernelDirector, error) {
	dir, err := pinFolder(opts.pinRoot(), "director")
	if err != nil {
		return nil, err
	}
	spec, err := loadDirector()
	if err != nil {
		return nil, fmt.Errorf("toa: the director's program: %w", err)
	}
	carried, newMaps, err := newLayouts(spec, dir)
	if err != nil {
		return nil, err
	}
	d := &KernelDirector{dir: dir, newMaps: newMaps}
	err = spec.LoadAndAssign(&d.objs, &ebpf.CollectionOptions{Maps: ebpf.MapOptions{PinPath: dir}})
	if err != nil {
		return nil, fmt.Errorf("toa: loading the director's program (pinned maps in %s): %w", dir, err)
	}
	if err := putKeys(d.objs.ToaServices, carried[directorMapToaServices]); err != nil {
		d.objs.Close()
		return nil, err
	}
	if d.tag, err = programTag(d.objs.ToaDirector); err != nil {
		d.objs.Close()
		return nil, err
	}
	if err := repin(d.objs.ToaDirector, filepath.Join(dir, "prog")); err != nil {
		d.objs.Close()
		return nil, err
	}
	if opts.NetNS > 0 {
		d.nl, err = netlink.NewHandleAt(opts.NetNS)
	} else {
		d.nl, err = netlink.NewHandle()
	}
	if err != nil {
		d.objs.Close()
		return nil, fmt.Errorf("toa: netlink: %w", err)
	}
	return d, nil
}

// repin pins prog at path in place of the program a previous lvsd pinned.
func repin(prog *ebpf.Program, path string) error {
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("toa: replacing the pinned program %s: %w", path, err)
	}
	if err := prog.Pin(path); err != nil {
		return fmt.Errorf("toa: pinning the program at %s: %w", path, err)
	}
	return nil
}

func (d *KernelDirector) filter(idx int) *netlink.BpfFilter {
	return &netlink.BpfFilter{
		FilterAttrs: netlink.FilterAttrs{
			LinkIndex: idx,
			Parent:    netlink.HANDLE_MIN_INGRESS,
			Handle:    filterHandle,
			Protocol:  unix.ETH_P_ALL,
			Priority:  filterPriority,
		},
		Fd:           d.objs.ToaDirector.FD(),
		Name:         filterName,
		DirectAction: true,
	}
}

// Attach implements Director. The replace makes it idempotent and swaps a
// previous lvsd's program for this one without a moment unfiltered.
func (d *KernelDirector) Attach(ctx context.Context, iface string) error {
	link, err := d.nl.LinkByName(iface)
	if err != nil {
		return fmt.Errorf("toa: interface %s: %w", iface, err)
	}
	if link.Attrs().EncapType != "ether" {
		return fmt.Errorf("toa: interface %s is %s: the program reads Ethernet frames only", iface, link.Attrs().EncapType)
	}
	clsact := &netlink.GenericQdisc{
		QdiscAttrs: netlink.QdiscAttrs{LinkIndex: link.Attrs().Index, Handle: netlink.MakeHandle(0xffff, 0), Parent: netlink.HANDLE_CLSACT},
		QdiscType:  "clsact",
	}
	if err := d.nl.QdiscAdd(clsact); err != nil && !errors.Is(err, unix.EEXIST) {
		return fmt.Errorf("toa: clsact qdisc on %s: %w", iface, err)
	}
	if err := d.nl.FilterReplace(d.filter(link.Attrs().Index)); err != nil {
		return fmt.Errorf("toa: tc filter on %s: %w", iface, err)
	}
	return nil
}

// Detach implements Director. The clsact qdisc stays: other tools may hang
// their filters on it.
func (d *KernelDirector) Detach(ctx context.Context, iface string) error {
	link, err := d.nl.LinkByName(iface)
	if err != nil {
		var notFound netlink.LinkNotFoundError
		if errors.As(err, &notFound) {
			return nil
		}
		return fmt.Errorf("toa: interface %s: %w", iface, err)
	}
	return d.detach(link)
}

func (d *KernelDirector) detach(link netlink.Link) error {
	filters, err := d.nl.FilterList(link, netlink.HANDLE_MIN_INGRESS)
	if err != nil {
		if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOENT) {
			return nil // no clsact qdisc
		}
		return fmt.Errorf("toa: tc filters of %s: %w", link.Attrs().Name, err)
	}
	for _, f := range filters {
		if bf, ok := f.(*netlink.BpfFilter); ok && bf.Name == filterName {
			if err := d.nl.FilterDel(bf); err != nil && !errors.Is(err, unix.ENOENT) {
				return fmt.Errorf("toa: removing the tc filter of %s: %w", link.Attrs().Name, err)
			}
		}
	}
	return nil
}

// Attached lists the interfaces that carry the program (this lvsd's or a
// previous one's).
func (d *KernelDirector) Attached(ctx context.Context) ([]string, error) {
	return attached(d.nl, func(string) bool { return true })
}

// Outdated implements Director: the interfaces whose filter runs a
// program with another tag than this one's.
func (d *KernelDirector) Outdated(ctx context.Context) ([]string, error) {
	return attached(d.nl, func(tag string) bool { return tag != d.tag })
}

// attached lists the interfaces with the program's filter whose program's
// tag is one that which wants.
func attached(nl *netlink.Handle, which func(tag string) bool) ([]string, error) {
	links, err := nl.LinkList()
	if err != nil {
		return nil, fmt.Errorf("toa: interfaces: %w", err)
	}
	var names []string
	for _, link := range links {
		filters, err := nl.FilterList(link, netlink.HANDLE_MIN_INGRESS)
		if err != nil {
			continue // no clsact qdisc
		}
		if slices.ContainsFunc(filters, func(f netlink.Filter) bool {
			bf, ok := f.(*netlink.BpfFilter)
			return ok && bf.Name == filterName && which(bf.Tag)
		}) {
			names = append(names, link.Attrs().Name)
		}
	}
	return names, nil
}

// SetServices implements Director.
func (d *KernelDirector) SetServices(ctx context.Context, vips []netip.AddrPort) error {
	keys, err := vipKeys(vips)
	if err != nil {
		return err
	}
	return syncSet(d.objs.ToaServices, keys)
}

// Services lists the VIP:ports in the map.
func (d *KernelDirector) Services(ctx context.Context) ([]netip.AddrPort, error) {
	return pinnedServices(d.objs.ToaServices)
}

func pinnedServices(m *ebpf.Map) ([]netip.AddrPort, error) {
	keys, err := mapKeys[vipKey](m)
	if err != nil {
		return nil, err
	}
	out := make([]netip.AddrPort, 0, len(keys))
	for _, k := range keys {
		out = append(out, k.addrPort())
	}
	return out, nil
}

// Pinned implements Director: an open KernelDirector has pinned its
// objects.
func (d *KernelDirector) Pinned() bool { return true }

// Stats implements Director.
func (d *KernelDirector) Stats(ctx context.Context) (DirectorStats, error) {
	return directorStats(d.objs.ToaDirectorStats)
}

func directorStats(m *ebpf.Map) (DirectorStats, error) {
	v, err := sumCounters(m, 4)
	if err != nil {
		return DirectorStats{}, err
	}
	return DirectorStats{Added: v[0], NoRoom: v[1], Stripped: v[2], Unsupported: v[3]}, nil
}

// Remove implements Director.
func (d *KernelDirector) Remove(ctx context.Context) error {
	links, err := d.nl.LinkList()
	if err != nil {
		return fmt.Errorf("toa: interfaces: %w", err)
	}
	var errs []error
	for _, link := range links {
		errs = append(errs, d.detach(link))
	}
	errs = append(errs, unpinAll(d.dir, d.objs.ToaServices, d.objs.ToaDirectorStats))
	return errors.Join(errs...)
}

// Close implements Director.
func (d *KernelDirector) Close() error {
	d.nl.Close()
	return d.objs.Close()
}
