package main

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/lvsd/lvsd/e2e/ecmplab"
	"github.com/lvsd/lvsd/e2e/topo"
)

// ecmpVIP is the VIP of -ecmp: the router accepts host routes from
// ecmplab.VIPRanges only.
const ecmpVIP = "192.0.2.50"

// ecmpDirectors is how many directors -ecmp runs.
const ecmpDirectors = 3

// ecmpRow is one size's figures under -ecmp.
type ecmpRow struct {
	services int
	cold     time.Duration // started together: the slowest one's start to reconciled
	rssKiB   []int         // per director
	idleCPU  []float64     // per director, share of one core
	flap     *healthFlap   // the slowest director's
}

// benchECMP runs three directors in cluster mode ecmp, each with the same
// services and a tcp check on every backend, announcing the VIP to an FRR
// router: their cold start, started together; their memory and idle CPU
// with the checks running; and one backend's check failing and passing
// again, which takes the health vote (docs/ecmp.md, "Health agreement")
// before any director's kernel changes.
func benchECMP(lvsdBin string, nServices, nBackends int, idle time.Duration) (ecmpRow, error) {
	out := ecmpRow{services: nServices}
	healthInterval = pickInterval(ecmpDirectors * nServices * nBackends) // the directors share the VM
	fmt.Printf("\nlvsd ECMP benchmark: %d directors voting on health, %d services × %d real servers (mh, %s), a tcp check on every backend every %v (%.0f checks/s per director)\n",
		ecmpDirectors, nServices, nBackends, forwardingName(), healthInterval, checksAsked(nServices*nBackends))
	tp, err := topo.Build(topo.WithRouter(), topo.WithDirectors(ecmpDirectors), topo.WithRealServers(nBackends), topo.WithClientSources(0))
	if err != nil {
		return out, err
	}
	defer tp.Close()
	servers, err := serveChecks(tp.RealServers())
	if err != nil {
		return out, err
	}
	defer servers.close()
	var neighbors []ecmplab.Neighbor
	for _, d := range tp.Directors() {
		neighbors = append(neighbors, ecmplab.Neighbor{Address: d.V4, HoldTime: 15 * time.Second})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	frr, err := tp.Router().StartFRR(ctx, ecmplab.RouterConfig(tp.Router().V4, neighbors))
	if err != nil {
		return out, err
	}
	defer frr.Stop()

	agentFiles, cleanup, err := writeECMPDirectors(tp, nServices, servers.addrs)
	defer cleanup()
	if err != nil {
		return out, err
	}
	// Started together, as a cluster's directors are after an outage.
	type started struct {
		l       *lvsd
		elapsed time.Duration
		err     error
	}
	results := make([]chan started, ecmpDirectors)
	for i, d := range tp.Directors() {
		results[i] = make(chan started, 1)
		go func() {
			l, elapsed, err := startLVSD(d, lvsdBin, agentFiles[i])
			results[i] <- started{l, elapsed, err}
		}()
	}
	var ls []*lvsd
	var errs []error
	for i := range results {
		r := <-results[i]
		if r.l != nil {
			ls = append(ls, r.l)
			defer r.l.stop()
		}
		errs = append(errs, r.err)
		out.cold = max(out.cold, r.elapsed)
	}
	if err := firstError(errs); err != nil {
		return out, err
	}
	fmt.Printf("cold start of %d directors started together: the slowest reconciled after %.2fs\n", ecmpDirectors, out.cold.Seconds())
	waitCtx, waitCancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer waitCancel()
	if _, err := tp.Router().WaitNexthops(waitCtx, netip.MustParsePrefix(ecmpVIP+"/32"), ecmpDirectors); err != nil {
		return out, fmt.Errorf("the router's paths to %s: %w", ecmpVIP, err)
	}

	// The first window still sees the start-up's garbage returned; the
	// figures kept are the second's.
	for window := range 2 {
		before, at := make([]int, len(ls)), time.Now()
		out.rssKiB = make([]int, len(ls))
		for i, l := range ls {
			out.rssKiB[i] = residentSet(l.cmd.Process.Pid).rss
			before[i] = cpuTicks(l.cmd.Process.Pid)
		}
		var profiled chan error
		if window == 1 && idleProfile != "" { // the first director's, as -idle-profile is without -ecmp
			profiled = make(chan error, 1)
			go func() {
				profiled <- saveProfile(filepath.Join(filepath.Dir(agentFiles[0]), "lvsd.sock"),
					fmt.Sprintf("profile?seconds=%d", int(idle.Seconds())), fmt.Sprintf("%s.ecmp.%d", idleProfile, nServices))
			}()
		}
		time.Sleep(idle)
		if profiled != nil {
			if err := <-profiled; err != nil {
				return out, err
			}
		}
		out.idleCPU = make([]float64, len(ls))
		for i, l := range ls {
			out.idleCPU[i] = float64(cpuTicks(l.cmd.Process.Pid)-before[i]) / 100 / time.Since(at).Seconds() // USER_HZ 100
		}
		fmt.Printf("idle window %d: RSS %s MiB, CPU %s %% of a core over %v\n", window+1,
			joinFigures(out.rssKiB, func(k int) float64 { return float64(k) / 1024 }), joinFigures(out.idleCPU, func(c float64) float64 { return 100 * c }), idle)
	}
	out.flap, err = flapBackend(ls, tp.Directors(), servers, ecmpVIP, 1000)
	return out, err
}

// writeECMPDirectors writes each director's agent file, cluster key and
// services, and returns the agent files and what removes them.
func writeECMPDirectors(tp *topo.Topology, nServices int, addrs []string) (agentFiles []string, cleanup func(), err error) {
	var dirs []string
	cleanup = func() {
		for _, dir := range dirs {
			os.RemoveAll(dir)
		}
	}
	key := make([]byte, 32)
	rand.Read(key)
	var peers, names []string
	for _, d := range tp.Directors() {
		peers, names = append(peers, d.V4.String()), append(names, d.ID)
	}
	files, _ := generate(ecmpVIP, forwarding(names), nServices, addrs)
	for _, d := range tp.Directors() {
		dir, err := os.MkdirTemp("", "lvsd-bench-"+d.ID)
		if err != nil {
			return nil, cleanup, err
		}
		dirs = append(dirs, dir)
		servicesDir := filepath.Join(dir, "services.d")
		os.MkdirAll(servicesDir, 0o755)
		for name, body := range files {
			if err := os.WriteFile(filepath.Join(servicesDir, name), []byte(body), 0o644); err != nil {
				return nil, cleanup, err
			}
		}
		if err := os.WriteFile(filepath.Join(dir, "cluster.key"), []byte(base64.StdEncoding.EncodeToString(key)+"\n"), 0o600); err != nil {
			return nil, cleanup, err
		}
		agent := ecmpAgentFile(d.ID, d.Link, filepath.Join(dir, "lvsd.sock"), d.V4.String(), peers, tp.Router().V4.String())
		agentFile := filepath.Join(dir, "lvsd.yaml")
		if err := os.WriteFile(agentFile, []byte(agent), 0o644); err != nil {
			return nil, cleanup, err
		}
		agentFiles = append(agentFiles, agentFile)
	}
	return agentFiles, cleanup, nil
}

// ecmpAgentFile is a director's agent file under -ecmp. Heartbeats every
// 200 ms and a failure timeout of 1 s, as the ECMP tests run: three
// directors and a router share the VM's two CPUs. FULLNAT under ECMP
// needs connection sync.
func ecmpAgentFile(node, link, socket, bind string, peers []string, router string) string {
	return fmt.Sprintf("node: %s\ninterface: %s\nservices_dir: services.d\nstate_dir: state\napi: {socket: %s}\n"+
		"cluster:\n  mode: ecmp\n  bind: %s\n  peers: [%s]\n  key_file: cluster.key\n  failure_timeout: 1s\n  heartbeat_interval: 200ms\n"+
		"  conn_sync: {enabled: %t}\n"+
		"bgp:\n  asn: %d\n  peers:\n    - {address: %s, asn: %d, hold_time: 15s, connect_retry: 1s}\n  stop_grace: 1s\n",
		node, link, socket, bind, strings.Join(peers, ", "), fullNAT, ecmplab.DirectorASN, router, ecmplab.RouterASN)
}

// forwarding is a service's forwarding lines for the directors named:
// DR (the default), or under -fullnat FULLNAT with each director's own
// source address (10.0.0.241, .242, …: above the real servers, which the
// topology numbers from .11).
func forwarding(directors []string) string {
	if !fullNAT {
		return ""
	}
	var b strings.Builder
	b.WriteString("forwarding: fullnat\nfullnat:\n  per_director:\n")
	for i, name := range directors {
		fmt.Fprintf(&b, "    %s: [10.0.0.%d]\n", name, 241+i)
	}
	return b.String()
}

func forwardingName() string {
	if fullNAT {
		return "FULLNAT"
	}
	return "DR"
}

func firstError(errs []error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// joinFigures formats one figure per director.
func joinFigures[T any](xs []T, f func(T) float64) string {
	var s []string
	for _, x := range xs {
		s = append(s, fmt.Sprintf("%.1f", f(x)))
	}
	return strings.Join(s, " / ")
}

// printECMP prints the rows of a -ecmp run. Under the health vote a
// director's kernel may change before its own check fails (the others'
// votes), so the flap is given from the change: the slowest director's
// own verdict, and the slowest director's kernel.
func printECMP(rows []ecmpRow) {
	fmt.Printf("\nECMP (%d directors voting; %s; a %s check on every backend every %v; one backend's check fails and passes again; per director or the slowest):\n",
		ecmpDirectors, forwardingName(), healthType, healthInterval)
	fmt.Println("services  cold (slowest)  RSS MiB (each)  idle CPU % (each)  fail: verdict  kernel  rise: verdict  kernel")
	for _, r := range rows {
		f := r.flap
		fmt.Printf("%8d  %13.2fs  %14s  %17s  %12.3fs  %5.3fs  %12.3fs  %5.3fs\n", r.services, r.cold.Seconds(),
			joinFigures(r.rssKiB, func(k int) float64 { return float64(k) / 1024 }), joinFigures(r.idleCPU, func(c float64) float64 { return 100 * c }),
			f.failDetect.Seconds(), f.failKernel.Seconds(), f.riseDetect.Seconds(), f.riseKernel.Seconds())
	}
}
