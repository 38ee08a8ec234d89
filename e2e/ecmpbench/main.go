// Command lvsd-ecmpbench compares two ways for ECMP directors to announce
// a VIP to an FRR router, in the same VM run and topology (client, router,
// three directors): lvsd's embedded speaker (cluster/bgp + cluster/bfd, one
// process per director) and FRR on every director (zebra, bfdd, bgpd
// driven by vtysh, as MetalLB's FRR mode does). For each it measures the
// time from start to three ECMP paths on the router, the withdraw latency
// (call to the router's kernel route), link-cut detection and recovery,
// what kill -9 does, and idle CPU. docs/ecmp.md "Choosing the engine"
// holds the figures. Run it in the VM: make ecmp-bench.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"net/netip"
	"os"
	"strings"
	"time"

	"github.com/lvsd/lvsd/cluster/bfd"
	"github.com/lvsd/lvsd/e2e/ecmplab"
	"github.com/lvsd/lvsd/e2e/topo"
)

var (
	runs      = flag.Int("runs", 5, "repetitions of each measurement")
	idle      = flag.Duration("idle", 20*time.Second, "window for the idle CPU sample")
	engines   = flag.String("engines", "lvsd,frr", "engines to measure, in order")
	interval  = flag.Duration("bfd-interval", bfd.DefaultInterval, "BFD transmit and receive interval on both sides (multiplier 3)")
	stressFor = flag.Duration("stress", 0, "after the other measurements, run -hogs busy loops this long and count the BFD sessions that went down (0: skip)")
	hogs      = flag.Int("hogs", 2, "busy loops of -stress (the VM has 2 vCPUs)")
	waitLimit = 90 * time.Second
	vip       = netip.MustParsePrefix("192.0.2.10/32")
)

const directors = 3

func main() {
	ecmplab.RunHelperIfRequested()
	flag.Parse()
	log.SetFlags(log.Ltime | log.Lmicroseconds)
	if os.Geteuid() != 0 {
		log.Fatal("needs root (network namespaces); run it in the VM: make ecmp-bench")
	}
	var results []result
	for _, name := range strings.Split(*engines, ",") {
		r, err := measure(name)
		if err != nil {
			log.Fatalf("%s: %v", name, err)
		}
		results = append(results, r)
	}
	fmt.Println()
	fmt.Println("| | " + strings.Join(names(results), " | ") + " |")
	fmt.Println("|---|" + strings.Repeat("---|", len(results)))
	for _, row := range rowNames {
		line := "| " + row + " |"
		for _, r := range results {
			line += " " + r.rows[row] + " |"
		}
		fmt.Println(line)
	}
}

var rowNames = []string{"start -> 3 paths", "withdraw -> path gone", "link cut -> path gone",
	"link back -> path back", "kill -9 speaker -> path gone", "kill -9 bfdd only", "idle CPU per director",
	"idle CPU of the router's FRR", "BFD sessions down under CPU stress"}

type result struct {
	name string
	rows map[string]string
}

func names(rs []result) []string {
	var out []string
	for _, r := range rs {
		out = append(out, r.name)
	}
	return out
}

type bench struct {
	tp     *topo.Topology
	router *topo.Host
	frr    *topo.FRR
	eng    engine
	events <-chan topo.RouteEvent
}

func measure(name string) (result, error) {
	tp, err := topo.Build(topo.WithRouter(), topo.WithDirectors(directors), topo.WithRealServers(0),
		topo.WithClientSources(0))
	if err != nil {
		return result{}, err
	}
	defer tp.Close()
	b := &bench{tp: tp, router: tp.Router()}
	switch name {
	case "lvsd":
		b.eng = &lvsdEngine{router: b.router, vip: vip}
	case "frr":
		b.eng = &frrEngine{router: b.router, vip: vip}
	default:
		return result{}, fmt.Errorf("unknown engine %q (lvsd, frr)", name)
	}
	defer b.eng.stop()
	ctx := context.Background()
	var ns []ecmplab.Neighbor
	for _, d := range tp.Directors() {
		n := ecmplab.Neighbor{Address: d.V4, BFD: true}
		if *interval != bfd.DefaultInterval {
			n.BFDInterval, n.BFDMultiplier = *interval, bfd.DefaultDetectMult
		}
		ns = append(ns, n)
	}
	if b.frr, err = b.router.StartFRR(ctx, ecmplab.RouterConfig(b.router.V4, ns)); err != nil {
		return result{}, err
	}
	defer b.frr.Stop()
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if b.events, err = b.router.WatchRoute(wctx, vip); err != nil {
		return result{}, err
	}
	r := result{name: b.eng.name(), rows: map[string]string{}}
	log.Printf("== %s", r.name)
	steps := []func(*result) error{b.converge, b.idleCPU, b.withdraws, b.linkCuts}
	if *stressFor > 0 {
		steps = append(steps, b.stress)
	}
	steps = append(steps, b.killBFDD, b.crash) // last: what they kill stays down
	for _, step := range steps {
		if err := step(&r); err != nil {
			return r, err
		}
		if f := b.eng.flaps(ctx); f != "" {
			log.Printf("sessions that went down so far: %s", f)
		}
	}
	return r, nil
}

// until waits for a change of the route after since that satisfies cond
// and returns when the kernel said so.
func (b *bench) until(since time.Time, cond func([]netip.Addr) bool) (time.Time, error) {
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	return ecmplab.Await(ctx, b.events, since, cond)
}

func (b *bench) converge(r *result) error {
	t0 := time.Now()
	for _, d := range b.tp.Directors() {
		if err := b.eng.start(context.Background(), d); err != nil {
			return err
		}
	}
	at, err := b.until(t0, ecmplab.Count(directors))
	if err != nil {
		return err
	}
	r.rows["start -> 3 paths"] = fmt.Sprintf("%.1f s", at.Sub(t0).Seconds())
	log.Printf("start -> %d paths: %v", directors, at.Sub(t0))
	return b.waitBFD()
}

// steady waits until the route has every director and the router every
// BFD session up, so a measurement starts from a steady state.
func (b *bench) steady() error {
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	if _, err := b.router.WaitNexthops(ctx, vip, directors); err != nil {
		return err
	}
	return b.waitBFD()
}

// waitBFD waits until the router has every BFD session up and then 3 s
// more.
func (b *bench) waitBFD() error {
	deadline := time.Now().Add(waitLimit)
	for {
		out, err := b.frr.Vtysh(context.Background(), "show bfd peers brief")
		if err != nil {
			return err
		}
		up := 0
		for _, st := range ecmplab.BFDPeers(out) {
			if st == "up" {
				up++
			}
		}
		if up == directors {
			time.Sleep(3 * time.Second)
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("router BFD not up:\n%s", out)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func (b *bench) idleCPU(r *result) error {
	cpu := func(pids []int) time.Duration {
		var sum time.Duration
		for _, pid := range pids {
			if d, err := ecmplab.ProcessCPU(pid); err == nil {
				sum += d
			}
		}
		return sum
	}
	var dirPIDs, routerPIDs []int
	for i := range directors {
		dirPIDs = append(dirPIDs, b.eng.directorPIDs(i)...)
	}
	for _, pid := range b.frr.PIDs() {
		routerPIDs = append(routerPIDs, pid)
	}
	d0, r0, t0 := cpu(dirPIDs), cpu(routerPIDs), time.Now()
	time.Sleep(*idle)
	d1, r1, el := cpu(dirPIDs), cpu(routerPIDs), time.Since(t0)
	perDirector := 100 * (d1 - d0).Seconds() / el.Seconds() / directors
	r.rows["idle CPU per director"] = fmt.Sprintf("%.1f %% of a vCPU", perDirector)
	r.rows["idle CPU of the router's FRR"] = fmt.Sprintf("%.1f %%", 100*(r1-r0).Seconds()/el.Seconds())
	log.Printf("idle CPU: %.1f %% per director, router FRR %.1f %%", perDirector, 100*(r1-r0).Seconds()/el.Seconds())
	return nil
}

func (b *bench) withdraws(r *result) error {
	var lat []time.Duration
	ctx := context.Background()
	d := b.tp.Director(3).V4 // engine index 2
	for range *runs {
		if err := b.steady(); err != nil {
			return err
		}
		t0 := time.Now()
		if err := b.eng.withdraw(ctx, 2); err != nil {
			return err
		}
		at, err := b.until(t0, ecmplab.Without(d))
		if err != nil {
			return err
		}
		lat = append(lat, at.Sub(t0))
		t1 := time.Now()
		if err := b.eng.announce(ctx, 2); err != nil {
			return err
		}
		if _, err := b.until(t1, ecmplab.With(d)); err != nil {
			return err
		}
	}
	r.rows["withdraw -> path gone"] = ecmplab.Summary(lat)
	log.Printf("withdraw: %s", ecmplab.Summary(lat))
	return b.waitBFD()
}

func (b *bench) linkCuts(r *result) error {
	d := b.tp.Director(2)
	var cut, back []time.Duration
	for range *runs {
		if err := b.steady(); err != nil {
			return err
		}
		t0 := time.Now()
		if err := d.SetPort(false); err != nil {
			return err
		}
		at, err := b.until(t0, ecmplab.Without(d.V4))
		if err != nil {
			return err
		}
		cut = append(cut, at.Sub(t0))
		t1 := time.Now()
		if err := d.SetPort(true); err != nil {
			return err
		}
		if at, err = b.until(t1, ecmplab.With(d.V4)); err != nil {
			return err
		}
		back = append(back, at.Sub(t1))
	}
	r.rows["link cut -> path gone"] = ecmplab.Summary(cut)
	r.rows["link back -> path back"] = ecmplab.Summary(back)
	log.Printf("link cut: %s; back: %s", ecmplab.Summary(cut), ecmplab.Summary(back))
	return b.waitBFD()
}

// killBFDD: FRR only: bfdd dies alone. The lab saw the path go and come
// back ~1 s later without BFD; lvsd has no separate BFD process.
func (b *bench) killBFDD(r *result) error {
	fe, ok := b.eng.(*frrEngine)
	if !ok {
		r.rows["kill -9 bfdd only"] = "n/a (BFD is inside the speaker)"
		return nil
	}
	if err := b.steady(); err != nil {
		return err
	}
	d := b.tp.Director(1).V4
	t0 := time.Now()
	if err := fe.frrs[0].Kill("bfdd"); err != nil {
		return err
	}
	at, err := b.until(t0, ecmplab.Without(d))
	if err != nil {
		return err
	}
	gone := at.Sub(t0)
	back, err := b.until(at, ecmplab.With(d))
	if err != nil {
		return err
	}
	r.rows["kill -9 bfdd only"] = fmt.Sprintf("path gone after %.2f s, back without BFD after %.1f s",
		gone.Seconds(), back.Sub(t0).Seconds())
	log.Print(r.rows["kill -9 bfdd only"])
	return nil
}

func (b *bench) crash(r *result) error {
	// Every path present (the bfdd-less director's included); BFD is not
	// needed for this one.
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	if _, err := b.router.WaitNexthops(ctx, vip, directors); err != nil {
		return err
	}
	t0 := time.Now()
	b.eng.crash(1)
	at, err := b.until(t0, ecmplab.Without(b.tp.Director(2).V4))
	if err != nil {
		return err
	}
	r.rows["kill -9 speaker -> path gone"] = fmt.Sprintf("%.2f s", at.Sub(t0).Seconds())
	log.Printf("kill -9: %v", at.Sub(t0))
	return nil
}
