package ipvs

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/lvsd/lvsd/ipvs/l4"
)

// A table as ip_vs_conn_seq_show prints it: IPv4 and IPv6 entries, a
// persistence template, an entry with persistence-engine data and an ICMP
// line that is skipped.
const procConns = `Pro FromIP   FPrt ToIP     TPrt DestIP   DPrt State       Expires PEName PEData
TCP 0A000066 B3E2 0A000034 1B59 0A000002 1B5A ESTABLISHED     899
TCP 0A000066 B3E3 0A000034 1B5A 0A000003 1B5A SYN_RECV         59
IP  0A000066 0000 0A000034 0000 0A000002 0000 NONE            359
UDP 0A000066 13C4 0A000034 13C4 0A000002 13C4 UDP             299 sip 1234@example
ICMP 0A000066 0000 0A000034 0000 0A000002 0000 ICMP              5
TCP 2001:0db8:0000:0000:0000:0000:0000:0005 C350 2001:0db8:0000:0000:0000:0000:0000:0010 0050 2001:0db8:0000:0000:0000:0000:0000:0011 0050 FIN_WAIT        118
`

func TestParseConnections(t *testing.T) {
	ap := netip.MustParseAddrPort
	got, err := ParseConnections(strings.NewReader(procConns))
	if err != nil {
		t.Fatal(err)
	}
	want := []Connection{
		{Protocol: l4.TCP, Client: ap("10.0.0.102:46050"), Virtual: ap("10.0.0.52:7001"), Dest: ap("10.0.0.2:7002"), State: "ESTABLISHED", Expires: 899 * time.Second},
		{Protocol: l4.TCP, Client: ap("10.0.0.102:46051"), Virtual: ap("10.0.0.52:7002"), Dest: ap("10.0.0.3:7002"), State: "SYN_RECV", Expires: 59 * time.Second},
		{Protocol: 0, Client: ap("10.0.0.102:0"), Virtual: ap("10.0.0.52:0"), Dest: ap("10.0.0.2:0"), State: "NONE", Expires: 359 * time.Second},
		{Protocol: l4.UDP, Client: ap("10.0.0.102:5060"), Virtual: ap("10.0.0.52:5060"), Dest: ap("10.0.0.2:5060"), State: "UDP", Expires: 299 * time.Second},
		{Protocol: l4.TCP, Client: ap("[2001:db8::5]:50000"), Virtual: ap("[2001:db8::10]:80"), Dest: ap("[2001:db8::11]:80"), State: "FIN_WAIT", Expires: 118 * time.Second},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("ParseConnections:\n got %v\nwant %v", got, want)
	}
}

func TestParseConnectionsEmptyAndBroken(t *testing.T) {
	if got, err := ParseConnections(strings.NewReader("Pro FromIP   FPrt ToIP     TPrt DestIP   DPrt State       Expires PEName PEData\n")); err != nil || len(got) != 0 {
		t.Errorf("header only: %v, %v", got, err)
	}
	for _, line := range []string{
		"TCP 0A000066 B3E2 0A000034 1B59 0A000002 1B5A ESTABLISHED",       // no expiry
		"TCP 0A0000 B3E2 0A000034 1B59 0A000002 1B5A ESTABLISHED 899",     // short address
		"TCP 0A000066 B3E2X 0A000034 1B59 0A000002 1B5A ESTABLISHED 899",  // bad port
		"TCP 0A000066 B3E2 0A000034 1B59 2001:db8::zz 1B5A ESTABLISHED 1", // bad IPv6
		"TCP 0A000066 B3E2 0A000034 1B59 0A000002 1B5A ESTABLISHED -1",    // bad expiry
	} {
		if _, err := ParseConnections(strings.NewReader(line + "\n")); err == nil {
			t.Errorf("%q: no error", line)
		}
	}
}

func TestConnFake(t *testing.T) {
	var f ConnFake
	ctx := context.Background()
	if c, err := f.Connections(ctx); err != nil || len(c) != 0 {
		t.Errorf("empty fake: %v, %v", c, err)
	}
	conns := []Connection{{Protocol: l4.TCP, State: "ESTABLISHED"}}
	f.Set(conns, nil)
	conns[0].State = "changed by the caller"
	if c, _ := f.Connections(ctx); len(c) != 1 || c[0].State != "ESTABLISHED" {
		t.Errorf("Connections = %v", c)
	}
	boom := errors.New("boom")
	f.Set(nil, boom)
	if _, err := f.Connections(ctx); !errors.Is(err, boom) {
		t.Errorf("err = %v", err)
	}
	if f.Calls() != 3 {
		t.Errorf("Calls = %d", f.Calls())
	}
}

// BenchmarkScanConnections: reading a connection table, per entry (the
// cost of lvsd status --connections on a table of millions).
func BenchmarkScanConnections(b *testing.B) {
	var table bytes.Buffer
	table.WriteString("Pro FromIP   FPrt ToIP     TPrt DestIP   DPrt State       Expires PEName PEData\n")
	for i := range 100_000 {
		fmt.Fprintf(&table, "TCP %08X %04X 0A000034 0050 0A00000B 0050 ESTABLISHED     899\n", 0xC0000200+i, 1024+i%60000)
	}
	b.SetBytes(int64(table.Len()))
	b.ResetTimer()
	for range b.N {
		n := 0
		if err := ScanConnections(bytes.NewReader(table.Bytes()), func(Connection) { n++ }); err != nil || n != 100_000 {
			b.Fatal(n, err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*100_000), "ns/entry")
}
