package main

import (
	"context"
	"fmt"
	"log"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

// stress runs -hogs busy loops for -stress and counts the BFD sessions the
// router saw go down meanwhile: none was cut, so each is a false drop,
// which takes a healthy director's path away until BFD and BGP are up
// again. The loops compete with the speakers, the router's FRR and the
// kernel for the VM's vCPUs, as a busy director's other work would.
func (b *bench) stress(r *result) error {
	before, err := b.routerDownEvents()
	if err != nil {
		return err
	}
	var loops []*exec.Cmd
	for range *hogs {
		c := exec.Command("sh", "-c", "while :; do :; done")
		if err := c.Start(); err != nil {
			return err
		}
		loops = append(loops, c)
	}
	time.Sleep(*stressFor)
	for _, c := range loops {
		c.Process.Kill()
		c.Wait()
	}
	time.Sleep(3 * time.Second) // a session that went down just now shows in the counters
	after, err := b.routerDownEvents()
	if err != nil {
		return err
	}
	r.rows["BFD sessions down under CPU stress"] = fmt.Sprintf("%d in %v with %d busy loops (BFD %v × 3)", after-before, *stressFor, *hogs, *interval)
	log.Printf("BFD sessions down under CPU stress: %d in %v (%d busy loops, BFD %v × 3)", after-before, *stressFor, *hogs, *interval)
	return b.steady()
}

// routerDownEvents sums the router's "Session down events" over its BFD
// peers.
func (b *bench) routerDownEvents() (int, error) {
	out, err := b.frr.Vtysh(context.Background(), "show bfd peers counters")
	if err != nil {
		return 0, err
	}
	n := 0
	for _, line := range strings.Split(out, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "Session down events:"); ok {
			k, err := strconv.Atoi(strings.TrimSpace(v))
			if err != nil {
				return 0, fmt.Errorf("show bfd peers counters: %q: %w", line, err)
			}
			n += k
		}
	}
	if !strings.Contains(out, "Session down events") {
		return 0, fmt.Errorf("show bfd peers counters says no down events:\n%s", out)
	}
	return n, nil
}
