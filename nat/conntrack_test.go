package nat

import (
	"context"
	"encoding/hex"
	"errors"
	"net/netip"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/lvsd/lvsd/ipvs/l4"

	"github.com/mdlayher/netlink"
)

func ap(s string) netip.AddrPort { return netip.MustParseAddrPort(s) }

// TestConntrackMessageBytes pins the request for one IPv4 TCP entry, byte
// by byte (include/uapi/linux/netfilter/nfnetlink_conntrack.h; nested
// attributes carry NLA_F_NESTED, numbers are big-endian).
func TestConntrackMessageBytes(t *testing.T) {
	e := ConntrackEntry{Protocol: l4.TCP, Client: ap("203.0.113.5:40001"), VIP: ap("198.51.100.9:80"), Backend: ap("10.99.0.2:8080"),
		SNATFrom: addr("10.99.0.100"), SNATTo: addr("10.99.0.101"), Mark: 0x10, Timeout: 900 * time.Second}
	m, err := newConntrackMessage(e, restoredStatus)
	if err != nil {
		t.Fatal(err)
	}
	if m.Header.Type != 0x0100 || m.Header.Flags != netlink.Request|netlink.Acknowledge|netlink.Create|netlink.Excl {
		t.Errorf("header type %#x flags %#x, want IPCTNL_MSG_CT_NEW (0x100), request|ack|create|excl", uint16(m.Header.Type), uint16(m.Header.Flags))
	}
	want := strings.Join([]string{
		"02000000", // nfgenmsg: AF_INET, NFNETLINK_V0, res_id 0
		// CTA_TUPLE_ORIG { IP { V4_SRC 203.0.113.5, V4_DST 198.51.100.9 }, PROTO { NUM 6, SRC 40001, DST 80 } }
		"34000180", "14000180", "08000100cb007105", "08000200c6336409",
		"1c000280", "0500010006000000", "060002009c410000", "0600030000500000",
		// CTA_TUPLE_REPLY { IP { 10.99.0.2 -> 203.0.113.5 }, PROTO { 6, 8080 -> 40001 } }
		"34000280", "14000180", "080001000a630002", "08000200cb007105",
		"1c000280", "0500010006000000", "060002001f900000", "060003009c410000",
		"080003000000000a", // CTA_STATUS SEEN_REPLY|CONFIRMED: not ASSURED, early_drop may pick it
		// CTA_PROTOINFO { TCP { STATE 3 (ESTABLISHED), FLAGS_ORIGINAL/REPLY {BE_LIBERAL, mask BE_LIBERAL} } }
		"20000480", "1c000180", "0500010003000000", "0600040008080000", "0600050008080000",
		// CTA_NAT_SRC { V4_MINIP, V4_MAXIP: 10.99.0.100, the persistent rule's choice for 203.0.113.5 }
		"14000680", "080001000a630064", "080002000a630064",
		"0800070000000384", // CTA_TIMEOUT 900
		"0800080000000010", // CTA_MARK 0x10
	}, "")
	if got := hex.EncodeToString(m.Data); got != want {
		t.Errorf("request bytes\n got %s\nwant %s", got, want)
	}
}

// TestConntrackMessageDecodesBack encodes IPv4 and IPv6, TCP and UDP
// entries and reads every field back.
func TestConntrackMessageDecodesBack(t *testing.T) {
	for _, e := range restoreCases {
		m, err := newConntrackMessage(e, restoredStatus&^ipsConfirmed)
		if err != nil {
			t.Fatal(err)
		}
		wantFam := byte(afInet)
		if e.VIP.Addr().Is6() {
			wantFam = afInet6
		}
		if m.Data[0] != wantFam {
			t.Errorf("%s: nfgenmsg family %d, want %d", e, m.Data[0], wantFam)
		}
		d := decodeEntry(t, m.Data[4:])
		want := dumpedEntry{proto: e.Protocol, orig: [2]netip.AddrPort{e.Client, e.VIP}, reply: [2]netip.AddrPort{e.Backend, e.Client},
			status: ipsSeenReply, mark: e.Mark, timeout: uint32(max(e.Timeout, minRestoreTimeout) / time.Second),
			natMin: snatAddress(e.Client.Addr(), e.SNATFrom, e.SNATTo), natMax: snatAddress(e.Client.Addr(), e.SNATFrom, e.SNATTo)}
		if e.Protocol == l4.TCP {
			want.hasTCP, want.tcpState, want.tcpFlags = true, tcpConntrackEstablished, [2]uint8{ipCtTCPFlagBeLiberal, ipCtTCPFlagBeLiberal}
		}
		if !reflect.DeepEqual(d, want) {
			t.Errorf("decoded\n%+v\nwant\n%+v", d, want)
		}
	}
}

// TestSNATAddress pins the persistent SNAT choice (TestRestoredEntriesCarryTraffic
// checks it against the kernel's).
func TestSNATAddress(t *testing.T) {
	if got := jhash2([]uint32{1, 2, 3, 4}, 0); got != 0x66491246 {
		t.Errorf("jhash2 = %#x", got)
	}
	for _, c := range []struct{ client, from, to, want string }{
		{"203.0.113.5", "10.99.0.100", "10.99.0.103", "10.99.0.101"},
		{"203.0.113.7", "10.99.0.100", "10.99.0.103", "10.99.0.100"},
		{"203.0.113.5", "10.99.0.100", "10.99.0.101", "10.99.0.100"},
		{"10.0.0.102", "10.0.0.70", "10.0.0.71", "10.0.0.70"},
		{"10.0.0.102", "10.0.0.70", "10.0.0.70", "10.0.0.70"},
		{"2001:db8:c::5", "2001:db8:99::100", "2001:db8:99::103", "2001:db8:99::102"},
		{"2001:db8:c::6", "2001:db8:99::100", "2001:db8:99::103", "2001:db8:99::103"},
	} {
		if got := snatAddress(addr(c.client), addr(c.from), addr(c.to)); got != addr(c.want) {
			t.Errorf("snatAddress(%s, %s-%s) = %s, want %s", c.client, c.from, c.to, got, c.want)
		}
	}
}

func TestConntrackMessageRejects(t *testing.T) {
	good := restoreCases[0]
	for name, mod := range map[string]func(*ConntrackEntry){
		"sctp":              func(e *ConntrackEntry) { e.Protocol = l4.SCTP },
		"mixed families":    func(e *ConntrackEntry) { e.Client = ap("[2001:db8::1]:1") },
		"client port 0":     func(e *ConntrackEntry) { e.Client = ap("203.0.113.5:0") },
		"no backend":        func(e *ConntrackEntry) { e.Backend = netip.AddrPort{} },
		"SNAT range upside": func(e *ConntrackEntry) { e.SNATFrom, e.SNATTo = e.SNATTo, e.SNATFrom },
		"SNAT v6 for v4":    func(e *ConntrackEntry) { e.SNATTo = addr("2001:db8::1") },
	} {
		e := good
		mod(&e)
		if _, err := newConntrackMessage(e, restoredStatus); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

// restoreCases are FULLNAT connections as a new VIP owner restores them.
var restoreCases = []ConntrackEntry{
	{Protocol: l4.TCP, Client: ap("203.0.113.5:40001"), VIP: ap("198.51.100.9:80"), Backend: ap("10.99.0.2:8080"),
		SNATFrom: addr("10.99.0.100"), SNATTo: addr("10.99.0.101"), Mark: 0x10, Timeout: 900 * time.Second},
	{Protocol: l4.UDP, Client: ap("203.0.113.5:40002"), VIP: ap("198.51.100.9:53"), Backend: ap("10.99.0.2:53"),
		SNATFrom: addr("10.99.0.100"), SNATTo: addr("10.99.0.100"), Mark: 0x11, Timeout: 5 * time.Second},
	{Protocol: l4.TCP, Client: ap("[2001:db8:1::5]:40003"), VIP: ap("[2001:db8:f::10]:443"), Backend: ap("[2001:db8:2::11]:443"),
		SNATFrom: addr("2001:db8:2::100"), SNATTo: addr("2001:db8:2::103"), Mark: 0x12, Timeout: 60 * time.Second},
}

func TestConntrackFake(t *testing.T) {
	var f ConntrackFake
	ctx := context.Background()
	res, err := f.RestoreConntrack(ctx, restoreCases)
	if err != nil || counts(res) != (restoreCounts{Created: 3}) {
		t.Fatalf("first restore: %+v, %v", res, err)
	}
	bad := restoreCases[0]
	bad.Protocol = l4.SCTP
	res, err = f.RestoreConntrack(ctx, append([]ConntrackEntry{bad}, restoreCases...))
	if err == nil || counts(res) != (restoreCounts{Existing: 3, Failed: 1}) {
		t.Errorf("second restore: %+v, %v", res, err)
	}
	f.FailWith(ErrFakeConntrack)
	fresh := restoreCases[0]
	fresh.Client = ap("203.0.113.6:1")
	if _, err := f.RestoreConntrack(ctx, []ConntrackEntry{fresh}); !errors.Is(err, ErrFakeConntrack) {
		t.Errorf("FailWith: %v", err)
	}
	if len(f.Entries()) != 3 || f.Calls() != 3 {
		t.Errorf("%d entries, %d calls", len(f.Entries()), f.Calls())
	}
}

// restoreCounts are a RestoreResult's counts, to compare.
type restoreCounts struct{ Created, Existing, Refreshed, Replaced, Failed, Absent int }

func counts(r RestoreResult) restoreCounts {
	return restoreCounts{r.Created, r.Existing, r.Refreshed, r.Replaced, r.Failed, r.Absent}
}
