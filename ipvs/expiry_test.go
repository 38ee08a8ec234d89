package ipvs

import (
	"context"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/lvsd/lvsd/ipvs/l4"
)

// shrinkingLister returns its tables one call after the other, then the last.
type shrinkingLister struct {
	tables [][]Connection
	calls  int
}

func (l *shrinkingLister) Connections(context.Context) ([]Connection, error) {
	t := l.tables[min(l.calls, len(l.tables)-1)]
	l.calls++
	return t, nil
}

func conn(proto l4.Protocol, virtual, dest string) Connection {
	return Connection{Protocol: proto, Client: netip.MustParseAddrPort("192.0.2.7:40000"),
		Virtual: netip.MustParseAddrPort(virtual), Dest: netip.MustParseAddrPort(dest)}
}

func TestAwaitExpiry(t *testing.T) {
	e := Expiring{VIP: netip.MustParseAddr("10.0.0.50"), Port: 80,
		Dests: []DestinationKey{{Addr: netip.MustParseAddr("10.0.0.11"), Port: 80}}}
	other := []Connection{
		conn(l4.TCP, "10.0.0.50:80", "10.0.0.12:80"),  // another destination
		conn(l4.TCP, "10.0.0.50:443", "10.0.0.11:80"), // another service port
		conn(l4.TCP, "10.0.0.51:80", "10.0.0.11:80"),  // another VIP
		conn(0, "10.0.0.50:80", "10.0.0.11:80"),       // a persistence template
	}
	l := &shrinkingLister{tables: [][]Connection{
		append([]Connection{conn(l4.TCP, "10.0.0.50:80", "10.0.0.11:80")}, other...),
		append([]Connection{conn(l4.UDP, "10.0.0.50:80", "10.0.0.11:80")}, other...),
		other,
	}}
	if err := AwaitExpiry(context.Background(), l, e); err != nil {
		t.Fatal(err)
	}
	if l.calls != 3 {
		t.Errorf("returned after %d reads, want 3 (until the matching entries were gone)", l.calls)
	}

	// A firewall-mark service (port 0) with a port-0 destination matches any port.
	fw := Expiring{VIP: netip.MustParseAddr("10.0.0.50"), Dests: []DestinationKey{{Addr: netip.MustParseAddr("10.0.0.11")}}}
	stuck := &shrinkingLister{tables: [][]Connection{{conn(l4.TCP, "10.0.0.50:8443", "10.0.0.11:8443")}}}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	err := AwaitExpiry(ctx, stuck, fw)
	if err == nil || !strings.Contains(err.Error(), "1 connection entries of 10.0.0.50 still present") {
		t.Errorf("entries that never expire: %v", err)
	}
}
