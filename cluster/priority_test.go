package cluster

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
	// A test run already at a higher priority (nice -10) keeps it.
	want := min(20-prio, -3)
	if err := RaisePriority(-3); err != nil {
		t.Fatal(err)
	}
	if p, _ := unix.Getpriority(unix.PRIO_PROCESS, os.Getpid()); 20-p != want {
		t.Errorf("nice %d after RaisePriority(-3) from nice %d, want %d", 20-p, 20-prio, want)
	}
	if err := RaisePriority(5); err != nil { // never lowers the priority
		t.Fatal(err)
	}
	if p, _ := unix.Getpriority(unix.PRIO_PROCESS, os.Getpid()); 20-p != want {
		t.Errorf("nice %d after RaisePriority(5), want %d kept", 20-p, want)
	}
}
