//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lvsd/lvsd/e2e/echo"
	"github.com/lvsd/lvsd/e2e/topo"
	"github.com/lvsd/lvsd/ipvs"
	"github.com/lvsd/lvsd/ipvs/l4"
)

// crashServices is how many services TestCrashDuringApply applies.
const crashServices = 1000

// TestCrashDuringApply: kill -9 lvsd at random points (15; 50 with
// E2E_CRASH_KILLS=50) while it applies
// 1,000 services (each round a configuration that moves them to other
// ports and VIPs, so the restarted agent adds, drains and deletes), and
// restart it each time. After every kill, every IPVS service and VIP address
// in the kernel is in lvsd's ownership record: written before the kernel
// changes, so no crash leaves an object lvsd made but no longer claims. A
// connection through a service every configuration has survives every
// kill and restart (nothing flushed, nothing re-created). At the end the
// kernel holds exactly the last configuration.
func TestCrashDuringApply(t *testing.T) {
	// 10 in `make test`, where each kill costs a restart and part of a
	// 5 s apply under emulation; E2E_CRASH_KILLS=50 is the figure.
	kills := 10
	if s := os.Getenv("E2E_CRASH_KILLS"); s != "" {
		fmt.Sscan(s, &kills)
	}
	tp := topo.New(t, topo.WithClientSources(1))
	steady := netip.MustParseAddr("10.0.0.50")
	holdVIPOnLoopback(t, steady, tp.RS(1), tp.RS(2))
	serveEcho(t, echo.Config{TCP: []uint16{80}}, tp.RS(1), tp.RS(2))
	d := newDirectorOnTmpfs(t, tp.Director(1), map[string]string{"steady": fmt.Sprintf(
		"service: steady\nvip: %s\nports: [80]\nbackends:\n  - {address: %s}\n  - {address: %s}\n", steady, tp.RS(1).V4, tp.RS(2).V4)})
	// Everything on the VM's tmpfs and no debug lines: thousands of log
	// writes over 9p would make the apply a matter of minutes under TCG.
	keep := d.logf
	d.logf = filepath.Join(d.dir, "lvsd.log")
	t.Cleanup(func() { _ = os.WriteFile(keep, []byte(d.log()), 0o644) })
	agentFile := filepath.Join(d.dir, "lvsd.yaml")
	b, err := os.ReadFile(agentFile)
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, agentFile, strings.Replace(string(b), "level: debug", "level: info", 1))
	bulk := filepath.Join(d.dir, "services.d", "bulk.yaml")
	writeFile(t, bulk, crashConfig(0, tp))
	d.start()
	started := time.Now()
	d.waitLog(0, 120*time.Second, "msg=reconciled")
	full := time.Since(started)
	t.Logf("cold start of %d services: reconciled after %v", crashServices+1, full.Round(time.Millisecond))
	// Any backend will do: the connection only has to outlive the kills.
	// (With one client source and mh-port, which one it reaches is a coin
	// toss; asking for rs1 failed every other run.)
	conn, err := echo.Connect(context.Background(), tp.Client(), tp.ClientSources(false)[0], netip.AddrPortFrom(steady, 80))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })

	rng := rand.New(rand.NewPCG(1, 2))
	for round := 1; round <= kills; round++ {
		writeFile(t, bulk, crashConfig(round, tp))
		d.stop()
		d.start()
		time.Sleep(time.Duration(rng.Int64N(int64(full))))
		if err := d.cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		<-d.exited
		if orphans := unclaimed(t, tp.Director(1), d.dir); len(orphans) > 0 {
			t.Fatalf("round %d: kernel objects lvsd made but does not claim after kill -9:\n  %s", round, strings.Join(orphans, "\n  "))
		}
	}
	off := d.logSize()
	d.start()
	d.waitLog(off, 120*time.Second, "msg=reconciled")
	want := crashKeys(kills, tp)
	want = append(want, ipvs.ServiceKey{Protocol: l4.TCP, Addr: steady, Port: 80}.String())
	slices.Sort(want)
	waitFor(t, 60*time.Second, "the kernel holding exactly the last configuration", func() bool {
		return slices.Equal(kernelKeys(t, tp.Director(1)), want)
	})
	if err := conn.Echo(context.Background(), "after all the kills"); err != nil {
		t.Errorf("the connection through the steady service broke: %v", err)
	}
	t.Logf("%d kills at random points of a %v apply: no unclaimed object, the connection survived, the last configuration in force", kills, full.Round(time.Millisecond))
}

// crashConfig is round's bulk configuration: crashServices services on
// two VIPs and consecutive ports, both shifting every round.
func crashConfig(round int, tp *topo.Topology) string {
	var b strings.Builder
	for i := range crashServices {
		vip, port := crashService(round, i)
		fmt.Fprintf(&b, "---\nservice: bulk%d\nvip: %s\nports: [%d]\nbackends:\n  - {address: %s}\n  - {address: %s}\n",
			i, vip, port, tp.RS(1).V4, tp.RS(2).V4)
	}
	return b.String()
}

func crashService(round, i int) (netip.Addr, int) {
	vip := netip.AddrFrom4([4]byte{10, 0, 1, byte(1 + round%4 + i%2)})
	return vip, 2000 + (round%3)*crashServices + i
}

// crashKeys are the IPVS service keys of round's bulk configuration.
func crashKeys(round int, tp *topo.Topology) []string {
	var out []string
	for i := range crashServices {
		vip, port := crashService(round, i)
		out = append(out, ipvs.ServiceKey{Protocol: l4.TCP, Addr: vip, Port: uint16(port)}.String())
	}
	return out
}

// kernelKeys lists the IPVS services in host's namespace, sorted.
func kernelKeys(t *testing.T, host *topo.Host) []string {
	t.Helper()
	var out []string
	for _, line := range strings.Split(ipvsSave(t, host), "\n") {
		f := strings.Fields(line)
		if len(f) >= 3 && f[0] == "-A" && f[1] == "-t" {
			out = append(out, "tcp:"+f[2])
		}
	}
	slices.Sort(out)
	return out
}

// unclaimed lists the IPVS services and VIP addresses in host's namespace
// that lvsd's records under dir/state do not claim.
func unclaimed(t *testing.T, host *topo.Host, dir string) []string {
	t.Helper()
	var owned struct {
		Services  []ipvs.ServiceKey `json:"services"`
		Addresses []struct {
			Prefix netip.Prefix `json:"prefix"`
		} `json:"addresses"`
	}
	claimed := map[string]bool{}
	for _, f := range []string{"owned.json", "addresses.json"} {
		b, err := os.ReadFile(filepath.Join(dir, "state", f))
		if os.IsNotExist(err) {
			continue
		}
		if err != nil || json.Unmarshal(b, &owned) != nil {
			t.Fatalf("reading %s: %v", f, err)
		}
		for _, k := range owned.Services {
			claimed[k.String()] = true
		}
		for _, a := range owned.Addresses {
			claimed[a.Prefix.String()] = true
		}
	}
	var out []string
	for _, k := range kernelKeys(t, host) {
		if !claimed[k] {
			out = append(out, "IPVS service "+k)
		}
	}
	for _, p := range addrsOf(t, host) {
		if p.Bits() == 32 && !claimed[p.String()] && p.Addr() != host.V4 {
			out = append(out, "address "+p.String())
		}
	}
	return out
}
