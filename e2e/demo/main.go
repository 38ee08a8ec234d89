// Command lvsd-demo shows lvsd at work inside the test VM (`make demo`): it
// builds a client, a director and two real servers as network namespaces,
// runs the real lvsd binary as the director of a DR service, sends client
// load and prints where the connections went.
package main

import (
	"context"
	"flag"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/lvsd/lvsd/e2e/echo"
	"github.com/lvsd/lvsd/e2e/topo"
	"github.com/lvsd/lvsd/ipvs"
)

const serviceFile = `service: web
vip: 10.0.0.50
protocol: tcp
ports: [80]
forwarding: dr        # real servers answer the client directly
scheduler: mh         # Maglev hashing (the default)
affinity: client-ip   # one client address always reaches the same server
backends:
  - {address: 10.0.0.11, weight: 1}
  - {address: 10.0.0.12, weight: 1}
`

var vip = netip.MustParseAddr("10.0.0.50")

func main() {
	lvsdBin := flag.String("lvsd", "bin/lvsd", "the lvsd binary")
	sources := flag.Int("sources", 48, "client source addresses")
	perSource := flag.Int("connections", 4, "connections per source address")
	flag.Parse()
	if err := demo(*lvsdBin, *sources, *perSource); err != nil {
		fmt.Fprintln(os.Stderr, "demo failed:", err)
		os.Exit(1)
	}
}

func demo(lvsdBin string, nSources, perSource int) error {
	kernel, _ := exec.Command("uname", "-r").Output()
	fmt.Printf("\n== lvsd demo on kernel %s (qemu VM, real IPVS)\n\n", strings.TrimSpace(string(kernel)))

	tp, err := topo.Build(topo.WithClientSources(nSources))
	if err != nil {
		return err
	}
	defer tp.Close()
	director, rs1, rs2 := tp.Director(1), tp.RS(1), tp.RS(2)
	fmt.Printf("hosts: client %s (+%d source addresses), director %s, rs1 %s, rs2 %s\n\n",
		tp.Client().V4, nSources, director.V4, rs1.V4, rs2.V4)

	for _, rs := range []*topo.Host{rs1, rs2} {
		if err := prepareRealServer(rs); err != nil {
			return err
		}
		srv, err := echo.Serve(context.Background(), rs, rs.ID, echo.Config{TCP: []uint16{80}})
		if err != nil {
			return err
		}
		defer srv.Close()
	}

	dir, err := os.MkdirTemp("", "lvsd-demo")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	agentFile := fmt.Sprintf("node: director\ninterface: %s\nservices_dir: services.d\nstate_dir: state\n", director.Link)
	os.MkdirAll(filepath.Join(dir, "services.d"), 0o755)
	os.WriteFile(filepath.Join(dir, "lvsd.yaml"), []byte(agentFile), 0o644)
	os.WriteFile(filepath.Join(dir, "services.d", "web.yaml"), []byte(serviceFile), 0o644)
	fmt.Printf("configured: lvsd.yaml\n%s\nconfigured: services.d/web.yaml\n%s\n", indent(agentFile), indent(serviceFile))

	var logBuf syncBuffer
	cmd := exec.Command(lvsdBin, "run", "--config", filepath.Join(dir, "lvsd.yaml"))
	cmd.Stdout, cmd.Stderr = &logBuf, &logBuf
	if err := director.Start(cmd); err != nil {
		return fmt.Errorf("starting lvsd: %w", err)
	}
	defer func() { cmd.Process.Signal(syscall.SIGTERM); cmd.Wait() }()
	if err := waitProgrammed(director, 2); err != nil {
		return fmt.Errorf("%w; lvsd log:\n%s", err, logBuf.String())
	}
	for i := 0; i < 50 && !strings.Contains(logBuf.String(), "msg=reconciled"); i++ {
		time.Sleep(20 * time.Millisecond) // the log line follows the last netlink call
	}
	fmt.Printf("lvsd log:\n%s\n", indent(logBuf.String()))

	start := time.Now()
	perServer, pinned, sawClient, failed := load(tp, nSources, perSource)
	elapsed := time.Since(start)
	total := nSources * perSource
	fmt.Printf("client load: %d connections from %d source addresses to %s:80 in %.1fs\n",
		total, nSources, vip, elapsed.Seconds())
	names := make([]string, 0, len(perServer))
	for n := range perServer {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		c := perServer[n]
		share := float64(c) / float64(total)
		fmt.Printf("  %-4s %-40s %4d  %5.1f%%\n", n, strings.Repeat("█", int(share*40+0.5)), c, share*100)
	}
	fmt.Printf("  failed connections:                          %d\n", failed)
	fmt.Printf("  every source address kept its server:        %v\n", pinned)
	fmt.Printf("  real servers saw the client's own address:   %v\n\n", sawClient)

	table, _ := director.Run(context.Background(), "ipvsadm", "-Ln")
	fmt.Printf("IPVS table on the director (ipvsadm -Ln):\n%s\n", indent(table))
	plan, _ := director.Run(context.Background(), lvsdBin, "plan", "--config", filepath.Join(dir, "lvsd.yaml"))
	fmt.Printf("lvsd plan (what lvsd would change now):\n%s\n", indent(plan))
	if failed > 0 || len(perServer) < 2 || !pinned || !sawClient {
		return fmt.Errorf("the load did not behave as expected")
	}
	return nil
}

// prepareRealServer does what a DR real server needs: the VIP on lo and no
// ARP answers for it (lvsd's realserver role will do this itself).
func prepareRealServer(h *topo.Host) error {
	for _, key := range []string{"all", h.Link} {
		if err := h.Sysctl("net/ipv4/conf/"+key+"/arp_ignore", "1"); err != nil {
			return err
		}
		if err := h.Sysctl("net/ipv4/conf/"+key+"/arp_announce", "2"); err != nil {
			return err
		}
	}
	return h.AddAddr(netip.PrefixFrom(vip, 32), "lo")
}

func waitProgrammed(director *topo.Host, dests int) error {
	k, err := ipvs.Open("/run/netns/" + director.Name)
	if err != nil {
		return err
	}
	defer k.Close()
	ctx := context.Background()
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		svcs, _ := k.Services(ctx)
		if len(svcs) == 1 {
			if d, _ := k.Destinations(ctx, svcs[0].ServiceKey); len(d) == dests {
				return nil
			}
		}
	}
	return fmt.Errorf("lvsd did not program IPVS within 30s")
}

func load(tp *topo.Topology, nSources, perSource int) (perServer map[string]int, pinned, sawClient bool, failed int) {
	var mu sync.Mutex
	perServer = map[string]int{}
	chosen := map[netip.Addr]string{}
	pinned, sawClient = true, true
	var wg sync.WaitGroup
	sem := make(chan struct{}, 8)
	for _, src := range tp.ClientSources(false)[:nSources] {
		for range perSource {
			wg.Add(1)
			sem <- struct{}{}
			go func() {
				defer func() { <-sem; wg.Done() }()
				rep, err := echo.Ask(context.Background(), tp.Client(), src, netip.AddrPortFrom(vip, 80), echo.TCP)
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					failed++
					return
				}
				perServer[rep.Name]++
				if prev, ok := chosen[src]; ok && prev != rep.Name {
					pinned = false
				}
				chosen[src] = rep.Name
				sawClient = sawClient && rep.Peer.Addr() == src
			}()
		}
	}
	wg.Wait()
	return perServer, pinned, sawClient, failed
}

func indent(s string) string {
	return "    " + strings.ReplaceAll(strings.TrimRight(s, "\n"), "\n", "\n    ") + "\n"
}

// syncBuffer collects lvsd's output, written by the process's pipe copier.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
