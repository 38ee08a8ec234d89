package ipvs

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"slices"
	"testing"

	"github.com/vishvananda/netlink/nl"
)

// A GET_DAEMON reply carries the same nest NEW_DAEMON takes; encoding and
// parsing must round-trip, with the port in host order and the group in
// network order, as ip_vs_genl_new_daemon reads them.
func TestDaemonAttrsRoundTrip(t *testing.T) {
	ds := []Daemon{
		{State: DaemonMaster, Interface: "lo", SyncID: 7, MaxLen: 1472, Group: DefaultSyncGroup, Port: 8848, TTL: 1},
		{State: DaemonBackup, Interface: "eth0", SyncID: 255, MaxLen: 65487, Group: netip.MustParseAddr("ff05::81"), Port: 9000, TTL: 64},
	}
	var msgs [][]byte
	for _, d := range ds {
		msgs = append(msgs, append([]byte{genlCmdNewDaemon, 1, 0, 0}, encodeDaemon(d, true).Serialize()...))
	}
	got, err := parseDaemons(msgs)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, ds) {
		t.Fatalf("round trip:\n got %v\nwant %v", got, ds)
	}

	attrs, err := nl.ParseRouteAttrAsMap(encodeDaemon(ds[0], true).Serialize()[4:])
	if err != nil {
		t.Fatal(err)
	}
	for typ, want := range map[uint16][]byte{
		daemonAttrGroup: {224, 0, 0, 81},
		daemonAttrPort:  binary.NativeEndian.AppendUint16(nil, 8848),
		daemonAttrIfn:   []byte("lo\x00"),
		daemonAttrTTL:   {1},
	} {
		if got := attrs[typ].Value; !bytes.Equal(got, want) {
			t.Errorf("attribute %d = %x, want %x", typ, got, want)
		}
	}

	// DEL_DAEMON carries the state alone; defaults are left to the kernel.
	if n := encodeDaemon(Daemon{State: DaemonBackup, Interface: "lo"}, false).Serialize(); len(n) != 4+8 {
		t.Errorf("stop nest %x: want only the state attribute", n)
	}
	if n := encodeDaemon(Daemon{State: DaemonBackup, Interface: "lo"}, true).Serialize(); len(n) != 4+8+8+8 {
		t.Errorf("start nest with defaults %x: want state, interface and syncid only", n)
	}
}

func TestParseDaemonShortAttr(t *testing.T) {
	msg := append([]byte{genlCmdNewDaemon, 1, 0, 0}, 8+4, 0, genlAttrDaemon, 0, 6, 0, daemonAttrState, 0, 1, 0, 0, 0)
	if _, err := parseDaemons([][]byte{msg}); err == nil {
		t.Error("a 2-byte state attribute must be an error")
	}
}

// The generic netlink header must come first, then the nest (nl's RawData
// would land after the attributes).
func TestGenlRequestLayout(t *testing.T) {
	b := newGenlRequest(42, genlCmdDelDaemon, 0, encodeDaemon(Daemon{State: DaemonMaster}, false)).Serialize()
	want := []byte{genlCmdDelDaemon, 1, 0, 0, 12, 0, genlAttrDaemon, 0, 8, 0, daemonAttrState, 0}
	if len(b) != 16+len(want)+4 || !bytes.Equal(b[16:16+len(want)], want) {
		t.Errorf("request %x: want header+nest %x after the netlink header", b, want)
	}
}
