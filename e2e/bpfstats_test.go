//go:build e2e

package e2e

import (
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// bpfRun is the kernel's run-time count of one BPF program (or of all
// programs sharing a name: BPF keeps 15 characters of it).
type bpfRun struct {
	runtime time.Duration
	count   uint64
}

// countBPFRuns has the kernel count BPF programs' run time
// (kernel.bpf_stats_enabled) until the test ends.
func countBPFRuns(t *testing.T) {
	t.Helper()
	c, err := ebpf.EnableStats(uint32(unix.BPF_STATS_RUN_TIME))
	if err != nil {
		t.Fatalf("enabling BPF run-time statistics: %v", err)
	}
	t.Cleanup(func() { c.Close() })
}

// bpfRuns are the run-time counts of the loaded programs whose names start
// with prefix, by name.
func bpfRuns(t *testing.T, prefix string) map[string]bpfRun {
	t.Helper()
	out := map[string]bpfRun{}
	var id ebpf.ProgramID
	for {
		next, err := ebpf.ProgramGetNextID(id)
		if errors.Is(err, os.ErrNotExist) {
			return out
		}
		if err != nil {
			t.Fatalf("listing BPF programs: %v", err)
		}
		id = next
		p, err := ebpf.NewProgramFromID(id)
		if err != nil {
			continue // gone meanwhile
		}
		info, err := p.Info()
		if err != nil || !strings.HasPrefix(info.Name, prefix) {
			p.Close()
			continue
		}
		st, err := p.Stats()
		p.Close()
		if err != nil {
			t.Fatalf("BPF program %s: %v", info.Name, err)
		}
		r := out[info.Name]
		r.runtime += st.Runtime
		r.count += st.RunCount
		out[info.Name] = r
	}
}
