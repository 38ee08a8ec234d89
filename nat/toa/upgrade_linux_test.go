package toa

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netlink"
)

// passProgram is a program of typ that lets everything pass: a previous
// release's program, as far as the loader can tell.
func passProgram(t *testing.T, typ ebpf.ProgramType, attach ebpf.AttachType, ret int32) *ebpf.Program {
	t.Helper()
	p, err := ebpf.NewProgram(&ebpf.ProgramSpec{Name: "toa_previous", Type: typ, AttachType: attach, License: "GPL",
		Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, ret), asm.Return()}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// watch polls check from a goroutine until the returned stop is called,
// which fails the test if check ever failed and returns how often it ran.
func watch(t *testing.T, what string, check func() error) (stop func() int) {
	t.Helper()
	var (
		done  = make(chan struct{})
		wg    sync.WaitGroup
		polls atomic.Int64
		first atomic.Pointer[error]
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-done:
				return
			default:
			}
			if err := check(); err != nil {
				first.CompareAndSwap(nil, &err)
			}
			polls.Add(1)
		}
	}()
	// Polls before and after the change, not only during it.
	waitPolls := func(n int64) {
		for start := polls.Load(); polls.Load() < start+n; {
			time.Sleep(time.Millisecond)
		}
	}
	waitPolls(20)
	return func() int {
		t.Helper()
		waitPolls(20)
		close(done)
		wg.Wait()
		if err := first.Load(); err != nil {
			t.Errorf("%s: %v", what, *err)
		}
		return int(polls.Load())
	}
}

// upgradeNetNS makes a network namespace with an Ethernet interface "dc"
// (a veth: this kernel may lack the dummy driver).
func upgradeNetNS(t *testing.T) DirectorOptions {
	t.Helper()
	ns := fmt.Sprintf("toa-u-%d-%d", os.Getpid()%100000, seq.Add(1))
	run(t, "ip", "netns", "add", ns)
	t.Cleanup(func() { exec.Command("ip", "netns", "del", ns).Run() })
	run(t, "ip", "-n", ns, "link", "add", "dc", "type", "veth", "peer", "name", "cd")
	run(t, "ip", "-n", ns, "link", "set", "dc", "up")
	return DirectorOptions{Options: Options{PinRoot: bpfFS(t)}, NetNS: nsHandle(t, ns)}
}

// toaFilter returns the program's tc filter on "dc", nil without one.
func toaFilter(nl *netlink.Handle) (*netlink.BpfFilter, error) {
	dev, err := nl.LinkByName("dc")
	if err != nil {
		return nil, err
	}
	filters, err := nl.FilterList(dev, netlink.HANDLE_MIN_INGRESS)
	if err != nil {
		return nil, err
	}
	for _, f := range filters {
		if bf, ok := f.(*netlink.BpfFilter); ok && bf.Name == filterName {
			return bf, nil
		}
	}
	return nil, nil
}

// TestDirectorUpgrade: a previous release left its program attached to
// "dc" and its maps pinned; the restarted lvsd sees it is another build's
// before loading anything, replaces it in place (the filter never goes,
// as a goroutine polling it shows), keeps the services and counters of the
// pinned maps, and leaves its own program alone on the next restart.
func TestDirectorUpgrade(t *testing.T) {
	requireRoot(t)
	ctx := context.Background()
	opts := upgradeNetNS(t)
	nl, err := netlink.NewHandleAt(opts.NetNS)
	if err != nil {
		t.Fatal(err)
	}
	defer nl.Close()

	// The previous release: the maps pinned with a service, and a program
	// of its own pinned and attached under this release's names.
	prev, err := OpenDirector(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	vips := []netip.AddrPort{netip.MustParseAddrPort("192.0.2.1:443")}
	if err := prev.SetServices(ctx, vips); err != nil {
		t.Fatal(err)
	}
	if err := prev.objs.ToaDirectorStats.Put(uint32(0), []uint64{7}); err != nil {
		t.Fatal(err)
	}
	old := passProgram(t, ebpf.SchedCLS, ebpf.AttachNone, 0)
	if err := prev.Attach(ctx, "dc"); err != nil { // the clsact qdisc
		t.Fatal(err)
	}
	f := prev.filter(0)
	dev, err := nl.LinkByName("dc")
	if err != nil {
		t.Fatal(err)
	}
	f.LinkIndex, f.Fd = dev.Attrs().Index, old.FD()
	if err := nl.FilterReplace(f); err != nil {
		t.Fatal(err)
	}
	if err := repin(old, filepath.Join(prev.dir, "prog")); err != nil {
		t.Fatal(err)
	}
	prev.Close()
	oldInfo, _ := old.Info()
	oldID, _ := oldInfo.ID()

	// The restart: before any change it reads the program as another
	// build's, and plans toa-attach (the agent's planner, from Outdated).
	upgraded := NewOnDemandDirector(opts)
	if out, err := upgraded.Outdated(ctx); err != nil || !slices.Equal(out, []string{"dc"}) {
		t.Fatalf("outdated before the replace: %v, %v; want [dc]", out, err)
	}
	stop := watch(t, "the filter on dc", func() error {
		f, err := toaFilter(nl)
		if err == nil && f == nil {
			err = errors.New("a moment without the TOA filter")
		}
		return err
	})
	if err := upgraded.Attach(ctx, "dc"); err != nil {
		t.Fatal(err)
	}
	polls := stop()
	t.Logf("%d polls of the filter, none without it", polls)

	f, err = toaFilter(nl)
	if err != nil || f == nil || f.Id == int(oldID) {
		t.Fatalf("after the replace the filter is %+v, %v; the previous program was %d", f, err, oldID)
	}
	if want, err := directorTag(); err != nil || f.Tag != want {
		t.Errorf("the filter's program has tag %s, this build's %s (%v)", f.Tag, want, err)
	}
	if out, err := upgraded.Outdated(ctx); err != nil || len(out) > 0 {
		t.Errorf("outdated after the replace: %v, %v", out, err)
	}
	if got, err := upgraded.Services(ctx); err != nil || !slices.Equal(got, vips) {
		t.Errorf("services carried over: %v, %v; want %v", got, err, vips)
	}
	if st, err := upgraded.Stats(ctx); err != nil || st.Added != 7 {
		t.Errorf("counters carried over: %+v, %v; want Added 7", st, err)
	}
	upgraded.Close()
	replacedID := f.Id

	// The next restart finds its own program: not outdated before it is
	// opened (against the tag learnt from a load of its own), and a change
	// that opens it leaves the filter's program as it is.
	again := NewOnDemandDirector(opts)
	defer again.Close()
	if out, err := again.Outdated(ctx); err != nil || len(out) > 0 {
		t.Fatalf("this build's own program read as outdated: %v, %v", out, err)
	}
	if err := again.SetServices(ctx, append(vips, netip.MustParseAddrPort("192.0.2.2:443"))); err != nil {
		t.Fatal(err)
	}
	if f, err := toaFilter(nl); err != nil || f == nil || f.Id != replacedID {
		t.Errorf("an identical program was replaced: filter %+v, %v; want program %d", f, err, replacedID)
	}
	if out, err := again.Outdated(ctx); err != nil || len(out) > 0 {
		t.Errorf("outdated once loaded: %v, %v", out, err)
	}
	if err := again.Remove(ctx); err != nil {
		t.Fatal(err)
	}
	assertNothingPinned(t, opts.PinRoot)
}

// TestDirectorMapLayoutChanged: a pinned map whose layout differs from
// this build's (here a smaller toa_services) is replaced by a new one with
// its services carried over, and the program goes on every interface even
// when the attached one has the same instructions: it runs on the old map.
func TestDirectorMapLayoutChanged(t *testing.T) {
	requireRoot(t)
	ctx := context.Background()
	opts := upgradeNetNS(t)

	first := NewOnDemandDirector(opts)
	if err := first.Attach(ctx, "dc"); err != nil {
		t.Fatal(err)
	}
	first.Close()
	dir := filepath.Join(opts.PinRoot, "director")
	path := filepath.Join(dir, directorMapToaServices)
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	pinSmallServices(t, path, netip.MustParseAddrPort("[2001:db8::1]:80"))

	d := NewOnDemandDirector(opts)
	defer d.Close()
	if out, err := d.Outdated(ctx); err != nil || len(out) > 0 {
		t.Fatalf("outdated: %v, %v (the instructions are this build's)", out, err)
	}
	if err := d.SetServices(ctx, []netip.AddrPort{netip.MustParseAddrPort("[2001:db8::1]:80"), netip.MustParseAddrPort("192.0.2.9:80")}); err != nil {
		t.Fatalf("opening over a map of another layout: %v", err)
	}
	spec, err := directorSpec()
	if err != nil {
		t.Fatal(err)
	}
	re, err := ebpf.LoadPinnedMap(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer re.Close()
	if re.MaxEntries() != spec.Maps[directorMapToaServices].MaxEntries {
		t.Errorf("the pinned map holds %d, want this build's %d", re.MaxEntries(), spec.Maps[directorMapToaServices].MaxEntries)
	}
	nl, err := netlink.NewHandleAt(opts.NetNS)
	if err != nil {
		t.Fatal(err)
	}
	defer nl.Close()
	f, err := toaFilter(nl)
	if err != nil || f == nil {
		t.Fatalf("filter %+v, %v", f, err)
	}
	p, err := ebpf.NewProgramFromID(ebpf.ProgramID(f.Id))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	info, err := p.Info()
	if err != nil {
		t.Fatal(err)
	}
	ids, _ := info.MapIDs()
	reInfo, _ := re.Info()
	reID, _ := reInfo.ID()
	if !slices.Contains(ids, reID) {
		t.Errorf("the attached program uses maps %v, not the new toa_services %d", ids, reID)
	}
	if err := d.Remove(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestCarryKeysOverANewLayout: the keys of a set whose capacity changed
// reach the new map.
func TestCarryKeysOverANewLayout(t *testing.T) {
	requireRoot(t)
	ctx := context.Background()
	root := bpfFS(t)
	dir := filepath.Join(root, "director")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	want := []netip.AddrPort{netip.MustParseAddrPort("192.0.2.1:80"), netip.MustParseAddrPort("[2001:db8::1]:443")}
	pinSmallServices(t, filepath.Join(dir, directorMapToaServices), want...)
	d, err := OpenDirector(ctx, DirectorOptions{Options: Options{PinRoot: root}})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	got, err := d.Services(ctx)
	slices.SortFunc(got, netip.AddrPort.Compare)
	if err != nil || !slices.Equal(got, want) || !d.newMaps {
		t.Errorf("services %v, %v, new maps %v; want %v, true", got, err, d.newMaps, want)
	}
	if err := d.Remove(ctx); err != nil {
		t.Fatal(err)
	}
	assertNothingPinned(t, root)
}

// TestRealServerUpgrade: a previous release's programs linked to the
// cgroup are replaced by this build's through the pinned links (an atomic
// update: a goroutine polling the cgroup never finds it without), the
// backends carry over, and this build's own programs are left as they are
// on the next restart.
func TestRealServerUpgrade(t *testing.T) {
	requireRoot(t)
	ctx := context.Background()
	root := bpfFS(t)
	cg := cgroup(t)

	prev, err := OpenRealServer(ctx, Options{PinRoot: root})
	if err != nil {
		t.Fatal(err)
	}
	backends := []netip.AddrPort{netip.MustParseAddrPort("10.0.1.11:443")}
	if err := prev.SetServices(ctx, backends); err != nil {
		t.Fatal(err)
	}
	olds := map[string]*ebpf.Program{
		"link_sockops":      passProgram(t, ebpf.SockOps, ebpf.AttachCGroupSockOps, 1),
		"link_getpeername4": passProgram(t, ebpf.CGroupSockAddr, ebpf.AttachCgroupInet4GetPeername, 1),
		"link_getpeername6": passProgram(t, ebpf.CGroupSockAddr, ebpf.AttachCgroupInet6GetPeername, 1),
	}
	for _, h := range prev.hooks() {
		l, err := link.AttachCgroup(link.CgroupOptions{Path: cg, Attach: h.attach, Program: olds[h.pin]})
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Pin(filepath.Join(prev.dir, h.pin)); err != nil {
			t.Fatal(err)
		}
		l.Close()
	}
	prev.Close()

	cgDir, err := os.Open(cg)
	if err != nil {
		t.Fatal(err)
	}
	defer cgDir.Close()
	attachedIDs := func(attach ebpf.AttachType) ([]ebpf.ProgramID, error) {
		res, err := link.QueryPrograms(link.QueryOptions{Target: int(cgDir.Fd()), Attach: attach})
		if err != nil {
			return nil, err
		}
		var ids []ebpf.ProgramID
		for _, p := range res.Programs {
			ids = append(ids, p.ID)
		}
		return ids, nil
	}
	hooks := []ebpf.AttachType{ebpf.AttachCGroupSockOps, ebpf.AttachCgroupInet4GetPeername, ebpf.AttachCgroupInet6GetPeername}
	stop := watch(t, "the cgroup's programs", func() error {
		for _, h := range hooks {
			ids, err := attachedIDs(h)
			if err != nil {
				return err
			}
			if len(ids) != 1 {
				return fmt.Errorf("%d programs on %s", len(ids), h)
			}
		}
		return nil
	})
	upgraded, err := OpenRealServer(ctx, Options{PinRoot: root})
	if err != nil {
		t.Fatal(err)
	}
	if err := upgraded.Attach(ctx, cg); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d polls of the cgroup, never without a program", stop())

	current := map[ebpf.AttachType]ebpf.ProgramID{}
	for _, h := range upgraded.hooks() {
		ids, err := attachedIDs(h.attach)
		if err != nil || len(ids) != 1 {
			t.Fatalf("%s: %v, %v", h.pin, ids, err)
		}
		if !sameProgram(ids[0], h.prog) {
			t.Errorf("%s: the attached program %d is not this build's", h.pin, ids[0])
		}
		current[h.attach] = ids[0]
	}
	if got, err := pinnedServices(upgraded.objs.ToaVips); err != nil || !slices.Equal(got, backends) {
		t.Errorf("backends carried over: %v, %v; want %v", got, err, backends)
	}
	upgraded.Close()

	again, err := OpenRealServer(ctx, Options{PinRoot: root})
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	if err := again.Attach(ctx, cg); err != nil {
		t.Fatal(err)
	}
	for _, h := range again.hooks() {
		if ids, err := attachedIDs(h.attach); err != nil || !slices.Equal(ids, []ebpf.ProgramID{current[h.attach]}) {
			t.Errorf("%s: an identical program was replaced: %v, %v; want [%d]", h.pin, ids, err, current[h.attach])
		}
	}
	if err := again.Remove(ctx); err != nil {
		t.Fatal(err)
	}
	assertNothingPinned(t, root)
}

// pinSmallServices pins at path a services map of another layout than this
// build's (16 entries instead of its capacity) holding vips, as an older
// release would have left it.
func pinSmallServices(t *testing.T, path string, vips ...netip.AddrPort) {
	t.Helper()
	spec, err := directorSpec()
	if err != nil {
		t.Fatal(err)
	}
	small := spec.Maps[directorMapToaServices].Copy()
	small.MaxEntries, small.Pinning = 16, ebpf.PinNone
	m, err := ebpf.NewMap(small)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	for _, ap := range vips {
		k, _ := newVIPKey(ap)
		if err := m.Put(k, uint8(1)); err != nil {
			t.Fatal(err)
		}
	}
	if err := m.Pin(path); err != nil {
		t.Fatal(err)
	}
}
