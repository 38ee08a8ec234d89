package agent

import (
	"context"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lvsd/lvsd/arp"
	"github.com/lvsd/lvsd/arp/sysctl"
	"github.com/lvsd/lvsd/ipvs"
	"github.com/lvsd/lvsd/nat"
)

// costs counts what a director asks of its kernel and its file system.
type costs struct {
	ipvs, addrs, nat, sysctls, daemons int
	stats, reads, lists                int
}

func (c costs) String() string {
	return fmt.Sprintf("ipvs %d, addresses %d, nftables %d, sysctls %d, daemons %d, stats %d, reads %d, directory lists %d",
		c.ipvs, c.addrs, c.nat, c.sysctls, c.daemons, c.stats, c.reads, c.lists)
}

type countedIPVS struct {
	ipvs.Interface
	n *int
}

func (c countedIPVS) Services(ctx context.Context) ([]ipvs.Service, error) {
	*c.n++
	return c.Interface.Services(ctx)
}

func (c countedIPVS) Service(ctx context.Context, k ipvs.ServiceKey) (ipvs.Service, error) {
	*c.n++
	return c.Interface.Service(ctx, k)
}

func (c countedIPVS) Destinations(ctx context.Context, k ipvs.ServiceKey) ([]ipvs.Destination, error) {
	*c.n++
	return c.Interface.Destinations(ctx, k)
}

func (c countedIPVS) AddService(ctx context.Context, s ipvs.Service) error {
	*c.n++
	return c.Interface.AddService(ctx, s)
}

func (c countedIPVS) UpdateService(ctx context.Context, s ipvs.Service) error {
	*c.n++
	return c.Interface.UpdateService(ctx, s)
}

func (c countedIPVS) DeleteService(ctx context.Context, k ipvs.ServiceKey) error {
	*c.n++
	return c.Interface.DeleteService(ctx, k)
}

func (c countedIPVS) AddDestination(ctx context.Context, k ipvs.ServiceKey, d ipvs.Destination) error {
	*c.n++
	return c.Interface.AddDestination(ctx, k, d)
}

func (c countedIPVS) UpdateDestination(ctx context.Context, k ipvs.ServiceKey, d ipvs.Destination) error {
	*c.n++
	return c.Interface.UpdateDestination(ctx, k, d)
}

func (c countedIPVS) DeleteDestination(ctx context.Context, k ipvs.ServiceKey, d ipvs.DestinationKey) error {
	*c.n++
	return c.Interface.DeleteDestination(ctx, k, d)
}

type countedAddrs struct {
	arp.Addresses
	n *int
}

func (c countedAddrs) List(ctx context.Context, dev string) ([]netip.Prefix, error) {
	*c.n++
	return c.Addresses.List(ctx, dev)
}

func (c countedAddrs) Add(ctx context.Context, dev string, p netip.Prefix) error {
	*c.n++
	return c.Addresses.Add(ctx, dev, p)
}

func (c countedAddrs) Delete(ctx context.Context, dev string, p netip.Prefix) error {
	*c.n++
	return c.Addresses.Delete(ctx, dev, p)
}

type countedNAT struct {
	nat.Interface
	n *int
}

func (c countedNAT) Apply(ctx context.Context, rs nat.Ruleset) error {
	*c.n++
	return c.Interface.Apply(ctx, rs)
}

func (c countedNAT) Installed(ctx context.Context) (string, error) {
	*c.n++
	return c.Interface.Installed(ctx)
}

func (c countedNAT) Remove(ctx context.Context) error {
	*c.n++
	return c.Interface.Remove(ctx)
}

type countedSysctls struct {
	sysctl.Interface
	n *int
}

func (c countedSysctls) Get(ctx context.Context, key string) (string, error) {
	*c.n++
	return c.Interface.Get(ctx, key)
}

func (c countedSysctls) Set(ctx context.Context, key, value string) error {
	*c.n++
	return c.Interface.Set(ctx, key, value)
}

type countedDaemons struct {
	ipvs.SyncDaemons
	n *int
}

func (c countedDaemons) Daemons(ctx context.Context) ([]ipvs.Daemon, error) {
	*c.n++
	return c.SyncDaemons.Daemons(ctx)
}

// countedDirector is a director of n services × 3 backends, one file per
// service, reconciled once, whose kernel and file calls from now on count
// into c.
func countedDirector(t testing.TB, n int) (*testEnv, *Agent, *costs) {
	e := newEnv(t)
	for i := range n {
		var b strings.Builder
		fmt.Fprintf(&b, "service: s%05d\nvip: 10.0.%d.1\nports: [%d]\nbackends:\n", i, i/1000, 1000+i%1000)
		for j := range 3 {
			fmt.Fprintf(&b, "  - {address: 10.1.0.%d}\n", j+1)
		}
		e.service(fmt.Sprintf("s%05d", i), b.String())
	}
	c := &costs{}
	k := e.kernel()
	k.IPVS, k.Addrs = countedIPVS{e.ipvs, &c.ipvs}, countedAddrs{e.addrs, &c.addrs}
	k.NAT, k.Sysctls, k.Daemons = countedNAT{e.nat, &c.nat}, countedSysctls{e.sysctls, &c.sysctls}, countedDaemons{e.ipvs, &c.daemons}
	h, err := NewHolder(k, nil, filepath.Join(e.dir, "state"), nil)
	if err != nil {
		t.Fatal(err)
	}
	a := e.agentWith(Options{Holder: h, Kernel: k})
	a.reconcile(context.Background())
	cache := a.loader.cache
	cache.Stat = func(p string) (fs.FileInfo, error) { c.stats++; return os.Stat(p) }
	cache.Read = func(p string) ([]byte, error) { c.reads++; return os.ReadFile(p) }
	cache.ReadDir = func(d string) ([]fs.DirEntry, error) { c.lists++; return os.ReadDir(d) }
	*c = costs{}
	e.ipvs.Ops()
	e.addrs.Ops()
	return e, a, c
}

// oneFileChange edits one service file of a countedDirector (a weight),
// and runs what the agent loop runs when its watch names that file; it
// returns what that cost and the IPVS changes made.
func oneFileChange(t testing.TB, e *testEnv, a *Agent, c *costs, i int) (costs, []string) {
	t.Helper()
	path := filepath.Join(e.dir, "services.d", fmt.Sprintf("s%05d.yaml", i))
	body, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	writeTestFile(t, path, strings.Replace(string(body), "{address: 10.1.0.3}", "{address: 10.1.0.3, weight: 5}", 1))
	*c = costs{}
	a.reload("file change", []string{path})
	a.tick()
	a.reconcile(context.Background())
	return *c, e.ipvs.Ops()
}

// Issue 16: a one-file change costs the same among 1,000 services as among
// 10,000: one stat and one read of that file, one service read back and one
// update; an idle Check costs nothing. A full reload (SIGHUP) stats every
// file (for the cache, and for the scan's fingerprint) but reads none that
// did not change, and touches no kernel.
func TestOneFileChangeCostIsFlat(t *testing.T) {
	var first costs
	for _, n := range []int{1000, 10000} {
		e, a, c := countedDirector(t, n)
		got, ops := oneFileChange(t, e, a, c, n/2)
		want := []string{fmt.Sprintf("update-destination tcp:10.0.%d.1:%d 10.1.0.3:%d weight=5 route", n/2/1000, 1000+n/2%1000, 1000+n/2%1000)}
		if !slices.Equal(ops, want) {
			t.Errorf("%d services: changes %q, want %q", n, ops, want)
		}
		t.Logf("%d services, one file changed: %v", n, got)
		if got.stats != 1 || got.reads != 1 || got.lists != 0 || got.ipvs > 3 {
			t.Errorf("%d services, one file changed: %v; want 1 stat, 1 read, no list, at most 3 IPVS calls", n, got)
		}
		if n == 1000 {
			first = got
		} else if got != first {
			t.Errorf("one file changed: %v at 1,000 services, %v at %d", first, got, n)
		}

		*c = costs{}
		a.tick()
		a.reconcile(context.Background())
		if *c != (costs{}) {
			t.Errorf("%d services, idle Check: %v; want nothing", n, *c)
		}

		*c = costs{}
		a.reload("signal", nil)
		a.reconcile(context.Background())
		t.Logf("%d services, SIGHUP with nothing changed: %v", n, *c)
		if c.reads != 0 || c.ipvs != 0 || c.addrs != 0 || c.stats != n+1 || c.lists != 1 {
			t.Errorf("%d services, SIGHUP with nothing changed: %v; want no read, no kernel call, one stat a file, one list", n, *c)
		}

		// The scan that follows compares with what the SIGHUP's load saw and
		// reloads nothing.
		*c = costs{}
		a.nextScan = time.Time{}
		a.checkFiles()
		if c.stats != n+1 || c.lists != 1 || c.reads != 0 {
			t.Errorf("%d services, the scan after a SIGHUP: %v; want one stat a file and one list (no reload)", n, *c)
		}
	}
}

// BenchmarkOneFileChange: the in-memory side of what TestOneFileChangeCostIsFlat
// counts in calls — a one-file edit, its reload and its pass, with the
// fakes as the kernel — at 1k, 5k and 10k services, reloaded as the watch
// names the file and as a SIGHUP does (every file stat'ed). ns/op should
// not grow with the number of services; where it does, the reload still
// does work for every service.
func BenchmarkOneFileChange(b *testing.B) {
	for _, trigger := range []string{"watch", "signal"} {
		for _, n := range []int{1000, 5000, 10000} {
			b.Run(fmt.Sprintf("trigger=%s/services=%d", trigger, n), func(b *testing.B) {
				e, a, _ := countedDirector(b, n)
				path := filepath.Join(e.dir, "services.d", fmt.Sprintf("s%05d.yaml", n/2))
				body, err := os.ReadFile(path)
				if err != nil {
					b.Fatal(err)
				}
				edits := []string{string(body), strings.Replace(string(body), "{address: 10.1.0.3}", "{address: 10.1.0.3, weight: 5}", 1)}
				changed := []string{path}
				if trigger == "signal" {
					changed = nil
				}
				b.ReportAllocs()
				b.ResetTimer()
				for i := range b.N {
					writeTestFile(b, path, edits[(i+1)%2])
					a.reload(trigger, changed)
					a.tick()
					a.reconcile(context.Background())
					e.ipvs.Ops()
				}
			})
		}
	}
}
