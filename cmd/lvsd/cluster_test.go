package main

import (
	"os"
	"testing"

	"golang.org/x/sys/unix"
)

func TestRaisePriority(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs CAP_SYS_NICE")
	}
	prio, _ := unix.Getpriority(unix.PRIO_PROCESS, 0)
	defer unix.Setpriority(unix.PRIO_PROCESS, 0, 20-prio)
	if err := raisePriority(-3); err != nil {
		t.Fatal(err)
	}
	if p, _ := unix.Getpriority(unix.PRIO_PROCESS, os.Getpid()); 20-p != -3 {
		t.Errorf("nice %d after raisePriority(-3)", 20-p)
	}
	if err := raisePriority(5); err != nil { // never lowers the priority
		t.Fatal(err)
	}
	if p, _ := unix.Getpriority(unix.PRIO_PROCESS, os.Getpid()); 20-p != -3 {
		t.Errorf("nice %d after raisePriority(5), want -3 kept", 20-p)
	}
}
