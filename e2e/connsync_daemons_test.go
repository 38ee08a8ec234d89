//go:build e2e

package e2e

import (
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lvsd/lvsd/e2e/topo"
)

// TestNoUnguardedSyncDaemons: the kernel's sync daemons apply whatever
// reaches their port, so they run only behind lvsd's nftables guard. With
// conn_sync on, daemons and guard are there; turned off by a reload, lvsd
// stops the daemons (before the guard goes); turned on again, both come
// back, the guard first.
func TestNoUnguardedSyncDaemons(t *testing.T) {
	vip := netip.MustParseAddr("10.0.0.50")
	tp := clusterSetup(t, vip)
	d := newClusterDirector(t, tp, tp.Director(1), clusterKey(t), "  quorum: 1\n", vip)
	d.start()
	d.waitLog(0, 30*time.Second, "msg=reconciled")
	check := func(when string, want bool) {
		t.Helper()
		daemons, guard := syncDaemonsOf(t, tp.Director(1)), syncGuardOf(t, tp.Director(1))
		if want != (daemons != "" && guard) || want != (daemons != "" || guard) {
			t.Errorf("%s: daemons %q, guard %v; want both %v", when, daemons, guard, want)
		}
	}
	check("conn_sync on", true)
	if !strings.Contains(d.log(), "op=replace-nft-tables") || strings.Index(d.log(), "op=replace-nft-tables") > strings.Index(d.log(), "op=start-daemon") {
		t.Errorf("the daemons started before their guard:\n%s", d.log())
	}

	agentFile := filepath.Join(d.dir, "lvsd.yaml")
	b, err := os.ReadFile(agentFile)
	if err != nil {
		t.Fatal(err)
	}
	off := d.logSize()
	writeAtomic(t, agentFile, string(b)+"  conn_sync: {enabled: false}\n")
	d.hup()
	d.waitLog(off, 10*time.Second, "msg=reconciled")
	check("conn_sync turned off", false)
	if since := d.logSince(off); !strings.Contains(since, "op=stop-daemon") || !strings.Contains(since, "-nft-tables") ||
		strings.Index(since, "op=stop-daemon") > strings.Index(since, "-nft-tables") {
		t.Errorf("the daemons did not stop before the guard went:\n%s", d.logSince(off))
	}

	on := d.logSize()
	writeAtomic(t, agentFile, string(b))
	d.hup()
	d.waitLog(on, 10*time.Second, "msg=reconciled")
	check("conn_sync on again", true)
}

// syncDaemonsOf lists the sync daemons running in host's namespace ("" if none).
func syncDaemonsOf(t *testing.T, host *topo.Host) string {
	t.Helper()
	out, err := host.Run(t.Context(), "ipvsadm", "-L", "--daemon")
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(out)
}

// syncGuardOf reports whether lvsd's guard of the sync daemons' ports is
// in host's nftables.
func syncGuardOf(t *testing.T, host *topo.Host) bool {
	t.Helper()
	out, _ := host.Run(t.Context(), "nft", "list", "table", "ip", "lvsd")
	return strings.Contains(out, "only root feeds the IPVS sync daemons")
}
