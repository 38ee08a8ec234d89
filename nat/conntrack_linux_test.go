package nat

import (
	"context"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/lvsd/lvsd/ipvs/l4"

	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// These tests need root; they run on this host's kernel (conntrack and
// nf_nat, no IPVS), each in a fresh network namespace.

// dumpConntrack lists the conntrack table of the namespace fd.
func dumpConntrack(t *testing.T, fd int) []dumpedEntry {
	t.Helper()
	c, err := netlink.Dial(unix.NETLINK_NETFILTER, &netlink.Config{NetNS: fd})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	msgs, err := c.Execute(netlink.Message{
		Header: netlink.Header{Type: netlink.HeaderType(nfnlSubsysCtnetlink<<8 | ipctnlMsgCtGet),
			Flags: netlink.Request | netlink.Dump},
		Data: []byte{unix.AF_UNSPEC, 0, 0, 0},
	})
	if err != nil {
		t.Fatalf("dumping conntrack: %v", err)
	}
	var out []dumpedEntry
	for _, m := range msgs {
		out = append(out, decodeEntry(t, m.Data[4:]))
	}
	return out
}

// TestRestoreConntrack creates entries and reads them back from the kernel:
// the tuples, the source NAT to the SNAT range keeping the client's port,
// the status, mark, TCP state and liberal flags. A second restore finds
// them all and changes nothing.
func TestRestoreConntrack(t *testing.T) {
	requireNetAdmin(t)
	ctx := context.Background()
	ns := newTestNS(t)
	k := NewKernel(InNetNS(ns.fd))
	res, err := k.RestoreConntrack(ctx, restoreCases)
	if err != nil || counts(res) != (restoreCounts{Created: len(restoreCases)}) {
		t.Fatalf("RestoreConntrack = %+v, %v", res, err)
	}
	got := dumpConntrack(t, ns.fd)
	if len(got) != len(restoreCases) {
		t.Fatalf("%d entries in the table, want %d: %v", len(got), len(restoreCases), got)
	}
	for _, e := range restoreCases {
		i := slices.IndexFunc(got, func(d dumpedEntry) bool { return d.orig[0] == e.Client })
		if i < 0 {
			t.Errorf("no entry from %s in %v", e.Client, got)
			continue
		}
		d := got[i]
		t.Logf("restored: %s", d)
		snat := d.reply[1]
		if d.proto != e.Protocol || d.orig[1] != e.VIP || d.reply[0] != e.Backend ||
			snat.Port() != e.Client.Port() || snat.Addr().Compare(e.SNATFrom) < 0 || snat.Addr().Compare(e.SNATTo) > 0 {
			t.Errorf("entry %s, want %s -> %s reply from %s to the SNAT range %s-%s keeping port %d",
				d, e.Client, e.VIP, e.Backend, e.SNATFrom, e.SNATTo, e.Client.Port())
		}
		const ipsSrcNAT, ipsSrcNATDone = 1 << 4, 1 << 7
		if want := uint32(ipsSeenReply | ipsConfirmed | ipsSrcNAT | ipsSrcNATDone); d.status&want != want || d.status&ipsAssured != 0 {
			t.Errorf("%s: status %#x, want %#x and not assured (%#x)", e, d.status, want, ipsAssured)
		}
		if d.mark != e.Mark {
			t.Errorf("%s: mark %#x, want %#x", e, d.mark, e.Mark)
		}
		wantTimeout := uint32(max(e.Timeout, minRestoreTimeout) / time.Second)
		if d.timeout > wantTimeout || d.timeout+5 < wantTimeout {
			t.Errorf("%s: timeout %d, want about %d", e, d.timeout, wantTimeout)
		}
		if e.Protocol == l4.TCP && (d.tcpState != tcpConntrackEstablished ||
			d.tcpFlags[0]&ipCtTCPFlagBeLiberal == 0 || d.tcpFlags[1]&ipCtTCPFlagBeLiberal == 0) {
			t.Errorf("%s: TCP state %d flags %v, want ESTABLISHED, liberal both ways", e, d.tcpState, d.tcpFlags)
		}
	}
	res, err = k.RestoreConntrack(ctx, restoreCases)
	if err != nil || counts(res) != (restoreCounts{Existing: len(restoreCases)}) {
		t.Fatalf("second RestoreConntrack = %+v, %v; want all existing", res, err)
	}
	if again := dumpConntrack(t, ns.fd); len(again) != len(got) {
		t.Errorf("the second restore changed the table: %v", again)
	}
	// Refreshing entries gives them the new timeout, and nothing else.
	var longer []ConntrackEntry
	for _, e := range restoreCases {
		e.Refresh, e.Timeout = true, 20*time.Minute
		longer = append(longer, e)
	}
	res, err = k.RestoreConntrack(ctx, longer)
	if err != nil || counts(res) != (restoreCounts{Existing: len(restoreCases), Refreshed: len(restoreCases)}) {
		t.Fatalf("refreshing RestoreConntrack = %+v, %v; want all existing and refreshed", res, err)
	}
	for _, d := range dumpConntrack(t, ns.fd) {
		i := slices.IndexFunc(got, func(g dumpedEntry) bool { return g.orig == d.orig })
		if d.timeout+5 < 1200 || d.timeout > 1200 || i < 0 || d.reply != got[i].reply || d.mark != got[i].mark {
			t.Errorf("refreshed entry %s, want timeout about 1200 and otherwise %v", d, got[i])
		}
	}
	// A closing connection's entry goes to TIME_WAIT with the close seen
	// (a SYN reopens it); one whose original tuple another connection of
	// the client reuses (to another backend) is replaced.
	closing, reused := restoreCases[0], restoreCases[2]
	closing.Refresh, closing.Closing, closing.Timeout = true, true, 2*time.Minute
	reused.Refresh, reused.Backend = true, ap("[2001:db8:2::12]:443")
	res, err = k.RestoreConntrack(ctx, []ConntrackEntry{closing, reused})
	if err != nil || counts(res) != (restoreCounts{Existing: 2, Refreshed: 1, Replaced: 1}) {
		t.Fatalf("closing and reused: RestoreConntrack = %+v, %v", res, err)
	}
	for _, d := range dumpConntrack(t, ns.fd) {
		switch d.orig[0] {
		case closing.Client:
			if d.tcpState != tcpConntrackTimeWait || d.tcpFlags[0]&ipCtTCPFlagCloseInit == 0 || d.timeout > 120 || d.timeout+5 < 120 {
				t.Errorf("closing entry %s, want TIME_WAIT, the close seen, timeout about 120", d)
			}
		case reused.Client:
			if d.reply[0] != reused.Backend || d.tcpState != tcpConntrackEstablished {
				t.Errorf("reused entry %s, want the new backend %s", d, reused.Backend)
			}
		}
	}
	// A bad entry fails alone; the others of the chunk are still handled.
	bad := restoreCases[0]
	bad.Backend = ap("[2001:db8::1]:80") // family mismatch
	res, err = k.RestoreConntrack(ctx, []ConntrackEntry{bad, restoreCases[1]})
	if err == nil || counts(res) != (restoreCounts{Existing: 1, Failed: 1}) {
		t.Errorf("bad entry: %+v, %v", res, err)
	}
	if !slices.Equal(res.Outcomes, []RestoreOutcome{OutcomeFailed, OutcomeExisting}) {
		t.Errorf("bad entry: outcomes %v, want failed, existing", res.Outcomes)
	}
}

// A NoCreate entry refreshes the entry of its connection and never makes
// one; an entry with a CreateTimeout is created with it, and refreshed with
// its Timeout.
func TestRestoreConntrackNoCreateAndCreateTimeout(t *testing.T) {
	requireNetAdmin(t)
	ctx := context.Background()
	ns := newTestNS(t)
	k := NewKernel(InNetNS(ns.fd))
	first, second := restoreCases[0], restoreCases[1]
	first.CreateTimeout, first.Timeout = 40*time.Second, 10*time.Minute
	second.NoCreate, second.Refresh = true, true
	res, err := k.RestoreConntrack(ctx, []ConntrackEntry{first, second})
	if err != nil || counts(res) != (restoreCounts{Created: 1, Absent: 1}) ||
		!slices.Equal(res.Outcomes, []RestoreOutcome{OutcomeCreated, OutcomeAbsent}) {
		t.Fatalf("RestoreConntrack = %+v, %v; want the first created, the second absent", res, err)
	}
	got := dumpConntrack(t, ns.fd)
	if len(got) != 1 || got[0].timeout > 40 || got[0].timeout+5 < 40 {
		t.Fatalf("table %v, want the first entry alone, timeout about 40", got)
	}
	again := first
	again.NoCreate, again.Refresh = true, true
	res, err = k.RestoreConntrack(ctx, []ConntrackEntry{again})
	if err != nil || counts(res) != (restoreCounts{Existing: 1, Refreshed: 1}) || res.Outcomes[0] != OutcomeRefreshed {
		t.Fatalf("NoCreate of an existing entry: %+v, %v; want refreshed", res, err)
	}
	if got := dumpConntrack(t, ns.fd); len(got) != 1 || got[0].timeout > 600 || got[0].timeout+5 < 600 {
		t.Errorf("table %v, want the entry refreshed to about 600", got)
	}
}

// TestRestoreConntrackMany restores more entries than one chunk, as many
// as a busy director's takeover would, and logs how long it takes.
func TestRestoreConntrackMany(t *testing.T) {
	requireNetAdmin(t)
	for _, n := range []int{200, 10000} {
		ns := newTestNS(t)
		k := NewKernel(InNetNS(ns.fd))
		es := make([]ConntrackEntry, n)
		for i := range es {
			es[i] = ConntrackEntry{Protocol: l4.TCP,
				Client: netip.AddrPortFrom(netip.AddrFrom4([4]byte{203, 0, 113, byte(i % 250)}), uint16(10000+i)),
				VIP:    ap("198.51.100.9:80"), Backend: ap("10.99.0.2:8080"),
				SNATFrom: addr("10.99.0.100"), SNATTo: addr("10.99.0.103"), Mark: 0x10, Timeout: time.Minute}
		}
		start := time.Now()
		res, err := k.RestoreConntrack(context.Background(), es)
		if err != nil || res.Created != n {
			t.Fatalf("RestoreConntrack of %d = %+v, %v", n, res, err)
		}
		took := time.Since(start)
		start = time.Now()
		if res, err = k.RestoreConntrack(context.Background(), es); err != nil || res.Existing != n {
			t.Fatalf("second RestoreConntrack of %d = %+v, %v", n, res, err)
		}
		t.Logf("%d entries restored in %v (%v each); all found existing in %v", n, took, took/time.Duration(n), time.Since(start))
		if got := len(dumpConntrack(t, ns.fd)); got != n {
			t.Errorf("%d entries in the table, want %d", got, n)
		}
	}
}
