//go:build e2e

package e2e

import (
	"cmp"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// cpuUse is a snapshot of what the VM's processes have run so far, to say
// where the CPU went during a test's window: timing tests that fail under
// load need to know whether the machine was saturated, and by what.
type cpuUse struct {
	at       time.Time
	busy     uint64            // all CPUs, clock ticks not idle or iowait
	total    uint64            // all CPUs, clock ticks
	byName   map[string]uint64 // utime+stime in clock ticks, by command name
	byThread map[string]uint64 // the same for kernel threads (softirq, …)
}

func readCPUUse() cpuUse {
	u := cpuUse{at: time.Now(), byName: map[string]uint64{}, byThread: map[string]uint64{}}
	if b, err := os.ReadFile("/proc/stat"); err == nil {
		line, _, _ := strings.Cut(string(b), "\n")
		for i, f := range strings.Fields(line)[1:] {
			v, _ := strconv.ParseUint(f, 10, 64)
			u.total += v
			if i != 3 && i != 4 { // idle, iowait
				u.busy += v
			}
		}
	}
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, p := range stats {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		s := string(b)
		open, end := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
		if open < 0 || end < open {
			continue
		}
		f := strings.Fields(s[end+2:])
		if len(f) < 13 {
			continue
		}
		ut, _ := strconv.ParseUint(f[11], 10, 64)
		st, _ := strconv.ParseUint(f[12], 10, 64)
		flags, _ := strconv.ParseUint(f[6], 10, 64)
		name := s[open+1 : end]
		if flags&0x00200000 != 0 { // PF_KTHREAD
			u.byThread[name] += ut + st
		} else {
			u.byName[name] += ut + st
		}
	}
	return u
}

// since says how busy the VM was from before to u, and the top consumers
// (processes by name, and kernel threads together) in CPU seconds.
func (u cpuUse) since(before cpuUse) string {
	const hz = 100 // USER_HZ
	type use struct {
		name  string
		ticks uint64
	}
	var top []use
	for name, t := range u.byName {
		if d := t - min(t, before.byName[name]); d > 0 {
			top = append(top, use{name, d})
		}
	}
	var kernel uint64
	for name, t := range u.byThread {
		kernel += t - min(t, before.byThread[name])
	}
	top = append(top, use{"[kernel threads]", kernel})
	slices.SortFunc(top, func(a, b use) int { return cmp.Compare(b.ticks, a.ticks) })
	var b strings.Builder
	busy := float64(u.busy-before.busy) / float64(max(1, u.total-before.total))
	fmt.Fprintf(&b, "VM CPU over %v: %.0f%% busy;", u.at.Sub(before.at).Round(100*time.Millisecond), 100*busy)
	for _, x := range top[:min(len(top), 8)] {
		fmt.Fprintf(&b, " %s %.1fs", x.name, float64(x.ticks)/hz)
	}
	return b.String()
}
