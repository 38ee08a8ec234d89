package main

import (
	"fmt"
	"os"
	"runtime/pprof"
)

// startCPUProfile writes a CPU profile of the whole process to path
// (LVSD_CPU_PROFILE; "" none) until the returned stop runs: how the e2e
// labs find where a director's CPU goes under load. A profile that cannot
// start is reported and the command runs anyway.
func startCPUProfile(path string) (stop func()) {
	if path == "" {
		return func() {}
	}
	f, err := os.Create(path)
	if err == nil {
		if err = pprof.StartCPUProfile(f); err != nil {
			f.Close()
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "lvsd: LVSD_CPU_PROFILE:", err)
		return func() {}
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}
}
