//go:build e2e

package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// Paths handed over by the Makefile. Missing ones fail the run loudly: an e2e
// suite that quietly skips proves nothing.
var (
	lvsdBin = os.Getenv("LVSD_BIN")
	outDir  = os.Getenv("LVSD_E2E_OUT") // read-write share: logs survive the VM
)

func TestMain(m *testing.M) {
	if os.Getenv(syncProbeEnv) != "" { // re-executed as another user by checkSyncGuard
		os.Exit(sendSyncProbe())
	}
	var problems []string
	if lvsdBin == "" {
		problems = append(problems, "LVSD_BIN is not set (run the suite with `make e2e`)")
	} else if _, err := os.Stat(lvsdBin); err != nil {
		problems = append(problems, fmt.Sprintf("LVSD_BIN: %v", err))
	}
	if os.Geteuid() != 0 {
		problems = append(problems, "the e2e suite must run as root (inside the VM: `make e2e`)")
	}
	if _, err := os.Stat("/proc/net/ip_vs"); err != nil {
		problems = append(problems, "this kernel has no IPVS (/proc/net/ip_vs missing): run the suite in the VM with `make e2e`")
	}
	if len(problems) > 0 {
		fmt.Fprintln(os.Stderr, "e2e: cannot run:\n  "+strings.Join(problems, "\n  "))
		os.Exit(2)
	}
	if out, err := exec.Command("uname", "-r").Output(); err == nil {
		fmt.Printf("e2e: guest kernel %s", out)
	}
	os.Exit(m.Run())
}
